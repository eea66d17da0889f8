//! pagoda-core: the engine's brain, with no I/O and no tensors: requests and their sampling
//! parameters, KV block accounting with prefix caching, the scheduler, and `EngineCore`, which
//! drives any `ModelExecutor` one step at a time. `engine` runs it on its own thread.

pub mod add_request_error;
pub mod admission;
pub mod config;
pub mod constraint;
pub mod engine;
pub mod engine_core;
pub mod engine_output;
pub mod engine_request;
pub mod engine_stats;
pub mod executor;
pub mod kv;
pub mod logprobs;
pub mod lora;
pub mod request;
pub mod sampling_params;
pub mod sched;
pub mod slo;
pub mod speculative;
pub mod tenant;
pub mod validation;

pub use add_request_error::AddRequestError;
pub use admission::{Admission, QueueSlots};
pub use config::{CacheConfig, ConfigError, SchedulerConfig, SchedulingPolicy};
pub use constraint::{ConstraintError, ConstraintRef, ConstraintState, TokenConstraint};
pub use engine_core::EngineCore;
pub use engine_output::{EngineOutput, OutputTiming};
pub use engine_request::{EngineRequest, RequestId};
pub use engine_stats::{EngineStats, KvGroupUsage};
pub use executor::{
    Calibration, DraftWork, ExecutorError, ExecutorOutput, ModelExecutor, SampledToken,
};
pub use logprobs::{PositionLogprobs, TokenLogprob};
pub use lora::LoraRef;
pub use request::{FinishReason, Request, RequestStatus, SeqId};
pub use sampling_params::{SamplingParams, SamplingParamsError};
pub use sched::{ScheduledSeq, SchedulerOutput};
pub use slo::{SloGate, SloLoad, SloPolicy, SloTargets};
pub use speculative::{NumSpecTokens, SpecConfig, SpecCounters, SpecMethod};
pub use tenant::Tenant;
pub use validation::{CheckedRequest, LimitError, RequestLimits};
