//! vLLM's `/tokenize` and `/detokenize` bodies. `/tokenize` takes a `prompt` (completions
//! style), llama.cpp's `content`, or `messages` (chat style, rendered through the chat template
//! with any `tools`).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::chat::ChatMessage;

/// Body of `POST /tokenize`: `prompt` or `content` (or both with the same text, as a client
/// written for vLLM and llama.cpp sends them), or `messages`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TokenizeRequest {
    /// Model id (optional with one model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Text to tokenize.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// llama.cpp's name for the text to tokenize (special tokens off by default, as there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// A conversation to render with the chat template, then tokenize.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub messages: Option<Vec<ChatMessage>>,
    /// Add BOS and other special tokens (default: true for `prompt`, false for `content`; for
    /// `messages`, only when the template did not write the BOS itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub add_special_tokens: Option<bool>,
    /// llama.cpp's name for `add_special_tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub add_special: Option<bool>,
    /// With `messages`: end with the assistant header (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub add_generation_prompt: Option<bool>,
    /// With `messages`: end with the final (assistant) message open, to be continued.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continue_final_message: Option<bool>,
    /// With `messages`: extra variables for the chat template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat_template_kwargs: Option<Map<String, Value>>,
    /// With `messages`: the tools the template renders (vLLM's field), so the count is the one
    /// a chat request with these tools has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Value>,
    /// Also return each token's text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub return_token_strs: Option<bool>,
    /// Keys not listed above, kept so the server can name them in its 400.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl TokenizeRequest {
    /// Every top-level key this type reads; any other lands in `extra` (the server's field
    /// policy suggests the nearest of these for a misspelt one).
    pub const FIELDS: &'static [&'static str] = &[
        "model",
        "prompt",
        "content",
        "messages",
        "add_special_tokens",
        "add_special",
        "add_generation_prompt",
        "continue_final_message",
        "chat_template_kwargs",
        "tools",
        "return_token_strs",
    ];
}

/// Answer of `/tokenize`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenizeResponse {
    /// Number of tokens.
    pub count: u32,
    /// Context length of the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_model_len: Option<u32>,
    /// The token ids.
    pub tokens: Vec<u32>,
    /// Each token's text, when `return_token_strs` was set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_strs: Option<Vec<String>>,
}

/// Body of `POST /detokenize`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DetokenizeRequest {
    /// Model id (optional with one model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Token ids to turn back into text.
    pub tokens: Vec<u32>,
    /// Keys not listed above, kept so the server can name them in its 400.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl DetokenizeRequest {
    /// Every top-level key this type reads; any other lands in `extra` (the server's field
    /// policy suggests the nearest of these for a misspelt one).
    pub const FIELDS: &'static [&'static str] = &["model", "tokens"];
}

/// Answer of `/detokenize`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DetokenizeResponse {
    /// The decoded text.
    pub prompt: String,
}
