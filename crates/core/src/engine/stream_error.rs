//! Why a request's stream ended without its normal finish (`StreamError`), and the item a
//! request's stream carries, shared by the handle and the engine thread.

use thiserror::Error;

use crate::add_request_error::AddRequestError;
use crate::engine_output::EngineOutput;

pub(crate) type StreamItem = Result<EngineOutput, StreamError>;

/// Why a request's stream ended without its normal finish.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum StreamError {
    #[error("{0}")]
    Rejected(AddRequestError),
    #[error("the reader fell more than {0} outputs behind and was cut off")]
    Overflow(usize),
    #[error("the engine failed this request: {0}")]
    Engine(String),
    #[error("the engine is shutting down")]
    Shutdown,
}
