//! pagoda-core: request-level state that needs neither I/O nor tensors. For now this is the
//! sampling parameters and their validation; the scheduler and KV block accounting come later.
//! The crate stays dependency-light so the engine core can be unit-tested without a model.

pub mod sampling_params;

pub use sampling_params::{SamplingParams, SamplingParamsError};
