//! Why the engine refuses a request at admission: invalid as sent (`LimitError`), a
//! duplicate id, a full waiting queue, or a first token predicted past the SLO's TTFT.

use thiserror::Error;

use crate::engine_request::RequestId;
use crate::validation::LimitError;

/// A request the engine will not run: invalid as sent, or not now.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum AddRequestError {
    #[error(transparent)]
    Invalid(#[from] LimitError),
    #[error("request id {0} is already in use")]
    DuplicateId(RequestId),
    /// The queue cannot take this request now; it may later.
    #[error(
        "the waiting queue holds {waiting} of at most {limit} sequences and this request needs {requested}"
    )]
    QueueFull {
        waiting: usize,
        requested: usize,
        limit: usize,
    },
    /// The request alone needs more queue slots than there are: it can never be admitted.
    #[error(
        "this request needs {requested} sequences (prompts x n) but at most {limit} may wait at once"
    )]
    NeverAdmissible { requested: usize, limit: usize },
    /// The SLO policy predicts this request's first token after its TTFT target (`--slo`):
    /// queued, it would miss it and delay every request behind it.
    #[error(
        "the server predicts this request's first token in {predicted_ttft_ms} ms, past its {ttft_target_ms} ms target; retry in {retry_after_secs} s"
    )]
    SloWouldBreak {
        predicted_ttft_ms: u64,
        ttft_target_ms: u64,
        retry_after_secs: u64,
    },
}
