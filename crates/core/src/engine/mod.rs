//! The engine on its own OS thread: `EngineHandle` is the only way in (add a request, abort
//! one, read stats); each request's outputs come back on its own bounded stream.

mod engine_loop;
mod handle;

pub use handle::{EngineHandle, HandleOptions, RequestStream, StreamError};
