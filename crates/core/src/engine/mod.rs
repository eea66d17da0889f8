//! The engine on its own OS thread: `EngineHandle` is the only way in (add a request, abort
//! one, read stats); each request's outputs come back on its own bounded stream.

mod engine_loop;
mod handle;
mod kv_event_queue;
mod step_turns;
mod stream_error;

pub use handle::{EngineHandle, HandleOptions, RequestStream};
pub use kv_event_queue::{KvEventBatch, KvEventQueue, kv_event_queue};
pub use step_turns::{StepTurns, Turn};
pub use stream_error::StreamError;
