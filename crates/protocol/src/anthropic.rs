//! Anthropic's Messages API (`/v1/messages`, `/v1/messages/count_tokens`): the request with
//! its content blocks (kept as JSON so the server can refuse an unsupported block by name),
//! the `message` response, the stream events and Anthropic's error body.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A string, or a list of content blocks (`system`, `messages[].content`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum BlockContent {
    /// `"content": "Hello"`.
    Text(String),
    /// `"content": [{"type": "text", "text": "Hello"}, ...]`, each block as sent.
    Blocks(Vec<Map<String, Value>>),
}

/// One turn of `messages`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AnthropicMessage {
    /// `"user"` or `"assistant"`.
    pub role: String,
    /// Text or blocks (`text`, `tool_use`, `tool_result`, ...).
    pub content: BlockContent,
    /// Keys not listed above, for the server to name in its 400.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Body of `POST /v1/messages`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MessagesRequest {
    /// Model id.
    pub model: String,
    /// The conversation, alternating user and assistant turns.
    pub messages: Vec<AnthropicMessage>,
    /// Maximum tokens to generate (required, as Anthropic requires it).
    pub max_tokens: u32,
    /// System prompt: a string or text blocks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<BlockContent>,
    /// Sampling temperature, in [0, 1].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// Nucleus sampling mass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f32>,
    /// Keep only the k most likely tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<i32>,
    /// Strings that end the reply (`stop_reason: "stop_sequence"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_sequences: Option<Vec<String>>,
    /// Stream the answer as Anthropic's server-sent events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    /// `[{"name", "description", "input_schema"}]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<Map<String, Value>>>,
    /// `{"type": "auto" | "any" | "tool" | "none", "name"?, "disable_parallel_tool_use"?}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<Map<String, Value>>,
    /// `{"user_id": ...}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
    /// Extended thinking (refused: no thinking models are served).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking: Option<Value>,
    /// `"auto"` or `"standard_only"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_tier: Option<String>,
    /// Structured outputs: `{"format": {"type": "json_schema", "schema": {...}}}` (what the
    /// SDK's `messages.parse` sends), `effort`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_config: Option<Value>,
    /// The structured-outputs beta's top-level form of `output_config.format`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_format: Option<Value>,
    /// pagoda: this request's speculative decoding, within the server's (as on chat and
    /// completions): `false` turns it off, `{"method", "num_speculative_tokens"}` caps K.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speculative: Option<Value>,
    /// Ollama's: how long the model stays loaded after this request (seconds, or a duration
    /// such as `"5m"`; 0 unloads it after the request, negative keeps it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_alive: Option<Value>,
    /// Keys not listed above, kept so the server can name them in its 400.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl MessagesRequest {
    /// Every top-level key this type reads; any other lands in `extra` (the server's field
    /// policy suggests the nearest of these for a misspelt one).
    pub const FIELDS: &'static [&'static str] = &[
        "keep_alive",
        "speculative",
        "model",
        "messages",
        "max_tokens",
        "system",
        "temperature",
        "top_p",
        "top_k",
        "stop_sequences",
        "stream",
        "tools",
        "tool_choice",
        "metadata",
        "thinking",
        "service_tier",
        "output_config",
        "output_format",
    ];
}

/// Body of `POST /v1/messages/count_tokens`: the prompt fields of a messages request.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CountTokensRequest {
    /// Model id.
    pub model: String,
    /// The conversation.
    pub messages: Vec<AnthropicMessage>,
    /// System prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<BlockContent>,
    /// Tool definitions (they take prompt tokens too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<Map<String, Value>>>,
    /// Tool choice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<Map<String, Value>>,
    /// Refused as in a messages request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking: Option<Value>,
    /// As in [`MessagesRequest`]: checked, and it does not change the count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_config: Option<Value>,
    /// Keys not listed above.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl CountTokensRequest {
    /// Every top-level key this type reads; any other lands in `extra` (the server's field
    /// policy suggests the nearest of these for a misspelt one).
    pub const FIELDS: &'static [&'static str] = &[
        "model",
        "messages",
        "system",
        "tools",
        "tool_choice",
        "thinking",
        "output_config",
    ];
}

/// Answer of `count_tokens`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CountTokensResponse {
    /// Prompt tokens the request would take.
    pub input_tokens: u32,
}

/// A content block of the reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    /// Text.
    Text {
        /// The text.
        text: String,
    },
    /// A tool call.
    ToolUse {
        /// `toolu_...`.
        id: String,
        /// Tool name.
        name: String,
        /// The arguments object.
        input: Value,
    },
}

/// Token counts of a message.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnthropicUsage {
    /// Prompt tokens not read from the cache.
    pub input_tokens: u32,
    /// Generated tokens.
    pub output_tokens: u32,
    /// Prompt tokens served from the prefix cache.
    #[serde(default)]
    pub cache_read_input_tokens: u32,
    /// Always 0: pagoda's cache is written as a side effect, never billed.
    #[serde(default)]
    pub cache_creation_input_tokens: u32,
}

/// The `message` object (`type: "message"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MessagesResponse {
    /// `msg_...`.
    pub id: String,
    /// Always `"message"`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Always `"assistant"`.
    pub role: String,
    /// The reply's blocks.
    pub content: Vec<ContentBlock>,
    /// Model id.
    pub model: String,
    /// `end_turn`, `max_tokens`, `stop_sequence` or `tool_use`; `null` in `message_start`.
    pub stop_reason: Option<String>,
    /// The stop sequence that matched.
    pub stop_sequence: Option<String>,
    /// Token counts.
    pub usage: AnthropicUsage,
}

/// `delta` of `message_delta`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MessageDelta {
    /// Why the reply ended.
    pub stop_reason: Option<String>,
    /// The stop sequence that matched.
    pub stop_sequence: Option<String>,
}

/// `delta` of `content_block_delta`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum BlockDelta {
    /// More text of a text block.
    TextDelta {
        /// The piece.
        text: String,
    },
    /// More of a tool_use block's input, as JSON text.
    InputJsonDelta {
        /// The piece.
        partial_json: String,
    },
}

/// One event of a streamed message; its `type` is also the SSE `event:` name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StreamEvent {
    /// The message with empty content.
    MessageStart {
        /// The message so far.
        message: MessagesResponse,
    },
    /// A block opens.
    ContentBlockStart {
        /// Block index.
        index: u32,
        /// The block, empty.
        content_block: ContentBlock,
    },
    /// A block grows.
    ContentBlockDelta {
        /// Block index.
        index: u32,
        /// What it adds.
        delta: BlockDelta,
    },
    /// A block is complete.
    ContentBlockStop {
        /// Block index.
        index: u32,
    },
    /// The stop reason and the final output token count.
    MessageDelta {
        /// Stop reason and sequence.
        delta: MessageDelta,
        /// Output tokens.
        usage: AnthropicUsage,
    },
    /// The end.
    MessageStop,
}

impl StreamEvent {
    /// The SSE `event:` name (the same as `type`).
    pub fn name(&self) -> &'static str {
        match self {
            Self::MessageStart { .. } => "message_start",
            Self::ContentBlockStart { .. } => "content_block_start",
            Self::ContentBlockDelta { .. } => "content_block_delta",
            Self::ContentBlockStop { .. } => "content_block_stop",
            Self::MessageDelta { .. } => "message_delta",
            Self::MessageStop => "message_stop",
        }
    }
}

/// Anthropic's error body: `{"type": "error", "error": {"type", "message"}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnthropicError {
    /// Always `"error"`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The error.
    pub error: AnthropicErrorBody,
}

/// `error` of an [`AnthropicError`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnthropicErrorBody {
    /// `invalid_request_error`, `authentication_error`, `not_found_error`,
    /// `request_too_large`, `rate_limit_error`, `api_error`, `overloaded_error`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Human-readable; names the offending field.
    pub message: String,
}

impl AnthropicError {
    /// The error Anthropic sends with HTTP `status`.
    pub fn for_status(status: u16, message: impl Into<String>) -> Self {
        let kind = match status {
            400 | 405 | 422 => "invalid_request_error",
            401 => "authentication_error",
            403 => "permission_error",
            404 => "not_found_error",
            413 => "request_too_large",
            429 => "rate_limit_error",
            503 | 529 => "overloaded_error",
            _ => "api_error",
        };
        Self {
            kind: "error".to_owned(),
            error: AnthropicErrorBody {
                kind: kind.to_owned(),
                message: message.into(),
            },
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn events_serialize_as_anthropic_sends_them() {
        let e = StreamEvent::ContentBlockDelta {
            index: 1,
            delta: BlockDelta::InputJsonDelta {
                partial_json: "{\"a\"".into(),
            },
        };
        assert_eq!(
            serde_json::to_value(&e).unwrap(),
            json!({"type": "content_block_delta", "index": 1,
                   "delta": {"type": "input_json_delta", "partial_json": "{\"a\""}})
        );
        assert_eq!(e.name(), "content_block_delta");
        assert_eq!(
            serde_json::to_value(StreamEvent::MessageStop).unwrap(),
            json!({"type": "message_stop"})
        );
        let err = AnthropicError::for_status(429, "slow down");
        assert_eq!(
            serde_json::to_value(&err).unwrap(),
            json!({"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}})
        );
    }

    #[test]
    fn request_keeps_blocks_and_unknown_keys() {
        let r: MessagesRequest = serde_json::from_value(json!({
            "model": "m", "max_tokens": 5, "system": [{"type": "text", "text": "be brief"}],
            "messages": [{"role": "user", "content": "hi"}], "foo": 1
        }))
        .unwrap();
        assert!(matches!(r.system, Some(BlockContent::Blocks(ref b)) if b.len() == 1));
        assert!(r.extra.contains_key("foo"));
    }
}
