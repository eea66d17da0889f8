//! What one sequence produced in one step (`EngineOutput`), with its timing for latency
//! metrics.

use std::time::Instant;

use crate::engine_request::RequestId;
use crate::logprobs::PositionLogprobs;
use crate::request::FinishReason;

/// Timing of an output, for latency metrics.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OutputTiming {
    pub arrival: Instant,
    pub first_scheduled: Option<Instant>,
    /// When this output was produced (end of its step).
    pub at: Instant,
}

/// What one sequence produced in one step.
#[derive(Clone, Debug, PartialEq)]
pub struct EngineOutput {
    pub request_id: RequestId,
    /// Which of the request's `n` sequences.
    pub index: u32,
    pub new_token_ids: Vec<u32>,
    /// One per new token, when asked for.
    pub logprobs: Vec<PositionLogprobs>,
    /// Prompt logprobs (position 1 onward), sent once with the first token, when asked for.
    pub prompt_logprobs: Option<Vec<PositionLogprobs>>,
    pub finish_reason: Option<FinishReason>,
    pub num_prompt_tokens: usize,
    /// Prompt tokens served from the prefix cache.
    pub num_cached_tokens: usize,
    pub timing: OutputTiming,
}
