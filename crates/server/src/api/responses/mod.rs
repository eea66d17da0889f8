//! OpenAI's Responses API: `input` turns input items into chat messages, `endpoint` runs them
//! down the chat path, `output` writes output items and typed events, `store` keeps finished
//! responses for `previous_response_id`.

pub mod endpoint;
pub mod input;
pub mod output;
pub mod store;
