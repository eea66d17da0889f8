//! Serving for goodput (issue 38): latency targets the scheduler keeps for admitted requests
//! (`policy`: each step sized to the TPOT target, admission while the decode batch fits it) and
//! refuses to break at the door (`gate`: a request predicted to miss its TTFT gets a 429).

pub mod gate;
pub mod policy;

pub use gate::{SloGate, SloLoad};
pub use policy::{SloPolicy, SloTargets};
