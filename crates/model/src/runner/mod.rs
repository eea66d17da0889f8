//! The executor side of the engine: a flat `ForwardBatch` run by `CpuExecutor`, driven step by
//! step by `ModelRunner` (sampling, speculative verification, KV copies), and `build_engine`,
//! which assembles the runner, its proposers and KV tiers into an `EngineCore`.

pub mod batch;
mod calibration;
pub mod draft;
pub mod engine_setup;
pub mod executor;
pub mod model_runner;
mod parallel_setup;
mod sample_rows;
mod seq_state;
pub mod setup;
