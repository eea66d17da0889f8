//! The executor's side of a step as the core sees it: `ModelExecutor` runs a scheduled step
//! and returns `ExecutorOutput` (sampled tokens, prompt logprobs, failures, speculation work).
//! The core is tested against fakes of it.

use thiserror::Error;

use crate::kv::{BlockHash, BlockId};
use crate::logprobs::PositionLogprobs;
use crate::request::SeqId;
use crate::sched::SchedulerOutput;

/// What the executor returns for one sequence that reached the end of its known tokens.
#[derive(Clone, Debug, PartialEq)]
pub struct SampledToken {
    pub seq_id: SeqId,
    pub token_id: u32,
    /// Present when the request asked for logprobs.
    pub logprobs: Option<PositionLogprobs>,
}

/// One step's results from the executor.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ExecutorOutput {
    pub sampled: Vec<SampledToken>,
    /// Prompt logprobs computed this step, per sequence, for positions in order.
    pub prompt_logprobs: Vec<(SeqId, Vec<PositionLogprobs>)>,
    /// Sequences the executor cannot run (e.g. a constraint it cannot enforce), with why;
    /// each ends with `FinishReason::Error` while the rest of the step goes on.
    pub failed: Vec<(SeqId, String)>,
    /// Tokens proposed and verified per speculating sequence (its `sampled` entries are the
    /// accepted ones, then the target's own token).
    pub proposed: Vec<(SeqId, usize)>,
    /// Draft-model work inside this step, when a draft model proposed.
    pub draft: Option<DraftWork>,
    /// Tokens of each sequence the draft model fed this step holds KV for now, for the cost
    /// of catching a lagging sequence up (`Request::draft_fed`).
    pub draft_fed: Vec<(SeqId, usize)>,
}

/// What proposing with a draft model cost in a step, for the speculation cost model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DraftWork {
    /// Forwards in step with the target (each sequence feeding at most the two tokens a
    /// verification leaves it: the last proposal and the target's own token).
    pub forwards: usize,
    /// Sequences in the draft's forwards (the most in any one).
    pub seqs: usize,
    /// Seconds of those forwards: what one more proposal costs, for the cost model.
    pub seconds: f64,
    /// Seconds of all the draft's work in the step, catching up on a sequence's earlier
    /// tokens included (the part of the step that was not the target's).
    pub total_seconds: f64,
    /// Tokens fed by the forwards that were not in step (a sequence catching up on tokens
    /// the draft had not seen), and their seconds: what catching up costs a token.
    pub catch_up_tokens: usize,
    pub catch_up_seconds: f64,
}

/// Start-up timings of the executor, for the speculation cost model: seconds of a target step
/// against its tokens, and of one draft forward against its sequences.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Calibration {
    pub target: Vec<(usize, f64)>,
    pub draft: Vec<(usize, f64)>,
}

/// The executor failed a whole step.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("executor: {0}")]
pub struct ExecutorError(pub String);

/// Runs the model over a scheduled step. The core is tested against fakes of this.
pub trait ModelExecutor {
    fn execute(&mut self, step: &SchedulerOutput) -> Result<ExecutorOutput, ExecutorError>;

    /// Times a few steps of different sizes before serving (speculation's cost model).
    fn calibrate(&mut self) -> Calibration {
        Calibration::default()
    }

    /// Copies cached blocks, `(block, group key)`, to the lower KV tier and waits for the
    /// writes (at shutdown, so the next start finds them). A no-op without a tier.
    fn save_blocks(&mut self, _blocks: &[(BlockId, BlockHash)]) {}
}
