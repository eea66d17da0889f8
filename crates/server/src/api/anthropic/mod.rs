//! Anthropic's Messages API: `input` turns its request into chat messages, `endpoint` runs it
//! down the chat path, `output` writes content blocks and Anthropic's stream events.

pub mod endpoint;
pub mod input;
pub mod output;
