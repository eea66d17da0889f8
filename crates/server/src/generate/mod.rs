//! Stage 4, a `ValidRequest` -> the engine -> a response: submission and admission, the
//! per-choice text stream (stop strings, tool and reasoning parsing), and the SSE driver every
//! generation endpoint shares.

pub mod chat_output;
pub mod endpoint;
pub mod generation;
pub mod stream;

#[cfg(test)]
mod parallel_calls_tests;
