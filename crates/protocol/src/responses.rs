//! OpenAI's Responses API (`/v1/responses`): the request (input items kept as JSON so the
//! server can refuse an unsupported item by name), the `response` object with its output
//! items, and the typed stream events (`response.created`, `response.output_text.delta`, ...).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `input`: a string (one user message) or a list of items.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ResponseInput {
    /// `"input": "Hello"`.
    Text(String),
    /// Messages, `function_call` and `function_call_output` items, as sent.
    Items(Vec<Map<String, Value>>),
}

/// Body of `POST /v1/responses`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ResponsesRequest {
    /// Model id.
    pub model: String,
    /// The new input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<ResponseInput>,
    /// A system (developer) message put before the input; not carried to later turns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    /// Maximum tokens to generate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u32>,
    /// Sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// Nucleus sampling mass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f32>,
    /// Tools: `{"type": "function", "name", "description", "parameters", "strict"}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<Map<String, Value>>>,
    /// `"none" | "auto" | "required" | {"type": "function", "name"}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<Value>,
    /// Allow several calls in one turn (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel_tool_calls: Option<bool>,
    /// `{"format": {"type": "text" | "json_object" | "json_schema", ...}}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<Map<String, Value>>,
    /// Stream the answer as typed events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    /// Keep the response for `previous_response_id` and `GET` (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<bool>,
    /// Continue the conversation of a stored response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_response_id: Option<String>,
    /// Key-value tags, returned on the response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
    /// End-user id (logged with the request).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Seed for reproducible sampling (pagoda extension, as in chat).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// pagoda: this request's speculative decoding, within the server's (as on chat and
    /// completions): `false` turns it off, `{"method", "num_speculative_tokens"}` caps K.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speculative: Option<Value>,
    /// Ollama's: how long the model stays loaded after this request (seconds, or a duration
    /// such as `"5m"`; 0 unloads it after the request, negative keeps it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_alive: Option<Value>,
    /// Every other key: known OpenAI fields pagoda refuses by name, and unknown ones.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ResponsesRequest {
    /// Every top-level key this type reads; any other lands in `extra` (the server's field
    /// policy suggests the nearest of these for a misspelt one).
    pub const FIELDS: &'static [&'static str] = &[
        "keep_alive",
        "speculative",
        "model",
        "input",
        "instructions",
        "max_output_tokens",
        "temperature",
        "top_p",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "text",
        "stream",
        "store",
        "previous_response_id",
        "metadata",
        "user",
        "seed",
    ];
}

/// `content` of an output message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum OutputContent {
    /// Text of the reply.
    OutputText {
        /// The text.
        text: String,
        /// Always empty.
        annotations: Vec<Value>,
        /// Always empty (logprobs are not offered here).
        logprobs: Vec<Value>,
    },
}

/// An item of `output`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum OutputItem {
    /// The assistant's text.
    Message {
        /// `msg_...`.
        id: String,
        /// `in_progress`, `completed` or `incomplete`.
        status: String,
        /// Always `"assistant"`.
        role: String,
        /// Its parts.
        content: Vec<OutputContent>,
    },
    /// A call of a function tool.
    FunctionCall {
        /// `fc_...`.
        id: String,
        /// `call_...`: what the `function_call_output` item names.
        call_id: String,
        /// Function name.
        name: String,
        /// JSON arguments as text.
        arguments: String,
        /// `in_progress` or `completed`.
        status: String,
    },
}

/// `usage` of a response.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResponseUsage {
    /// Prompt tokens.
    pub input_tokens: u32,
    /// `{"cached_tokens"}`.
    pub input_tokens_details: InputTokensDetails,
    /// Generated tokens.
    pub output_tokens: u32,
    /// `{"reasoning_tokens"}`.
    pub output_tokens_details: OutputTokensDetails,
    /// Sum of both.
    pub total_tokens: u32,
}

/// `usage.input_tokens_details`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputTokensDetails {
    /// Prompt tokens served from the prefix cache.
    pub cached_tokens: u32,
}

/// `usage.output_tokens_details`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputTokensDetails {
    /// Always 0: no reasoning models are served.
    pub reasoning_tokens: u32,
}

/// The `response` object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    /// `resp_...`.
    pub id: String,
    /// Always `"response"`.
    pub object: String,
    /// Unix seconds.
    pub created_at: u64,
    /// `in_progress`, `completed` or `incomplete`.
    pub status: String,
    /// Always `null` (failures are HTTP errors or an error event).
    pub error: Option<Value>,
    /// `{"reason": "max_output_tokens"}` when incomplete.
    pub incomplete_details: Option<Value>,
    /// The request's instructions.
    pub instructions: Option<String>,
    /// The request's limit.
    pub max_output_tokens: Option<u32>,
    /// Model id.
    pub model: String,
    /// Messages and function calls.
    pub output: Vec<OutputItem>,
    /// As requested.
    pub parallel_tool_calls: bool,
    /// The previous response this one continues.
    pub previous_response_id: Option<String>,
    /// As requested.
    pub temperature: Option<f32>,
    /// As requested.
    pub top_p: Option<f32>,
    /// As requested (`"auto"` by default).
    pub tool_choice: Value,
    /// As requested.
    pub tools: Vec<Value>,
    /// `{"format": {...}}` as requested.
    pub text: Value,
    /// Whether it was stored.
    pub store: bool,
    /// As requested.
    pub metadata: Map<String, Value>,
    /// As requested.
    pub user: Option<String>,
    /// Token counts (`null` until completed).
    pub usage: Option<ResponseUsage>,
}

/// What a stream event says, by `type`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum EventKind {
    /// The response, in progress with no output.
    #[serde(rename = "response.created")]
    Created {
        /// The response so far.
        response: Response,
    },
    /// Generation has started.
    #[serde(rename = "response.in_progress")]
    InProgress {
        /// The response so far.
        response: Response,
    },
    /// An output item opens.
    #[serde(rename = "response.output_item.added")]
    OutputItemAdded {
        /// Its index in `output`.
        output_index: u32,
        /// The item, empty.
        item: OutputItem,
    },
    /// A content part of a message opens.
    #[serde(rename = "response.content_part.added")]
    ContentPartAdded {
        /// The message item's id.
        item_id: String,
        /// Its index in `output`.
        output_index: u32,
        /// The part's index in `content`.
        content_index: u32,
        /// The part, empty.
        part: OutputContent,
    },
    /// More text.
    #[serde(rename = "response.output_text.delta")]
    OutputTextDelta {
        /// The message item's id.
        item_id: String,
        /// Its index in `output`.
        output_index: u32,
        /// The part's index.
        content_index: u32,
        /// The piece.
        delta: String,
        /// Always empty.
        logprobs: Vec<Value>,
    },
    /// The part's whole text.
    #[serde(rename = "response.output_text.done")]
    OutputTextDone {
        /// The message item's id.
        item_id: String,
        /// Its index in `output`.
        output_index: u32,
        /// The part's index.
        content_index: u32,
        /// All of it.
        text: String,
        /// Always empty.
        logprobs: Vec<Value>,
    },
    /// A content part is complete.
    #[serde(rename = "response.content_part.done")]
    ContentPartDone {
        /// The message item's id.
        item_id: String,
        /// Its index in `output`.
        output_index: u32,
        /// The part's index.
        content_index: u32,
        /// The whole part.
        part: OutputContent,
    },
    /// More of a call's arguments.
    #[serde(rename = "response.function_call_arguments.delta")]
    FunctionCallArgumentsDelta {
        /// The call item's id.
        item_id: String,
        /// Its index in `output`.
        output_index: u32,
        /// The piece.
        delta: String,
    },
    /// A call's whole arguments.
    #[serde(rename = "response.function_call_arguments.done")]
    FunctionCallArgumentsDone {
        /// The call item's id.
        item_id: String,
        /// Its index in `output`.
        output_index: u32,
        /// Function name.
        name: String,
        /// All of them.
        arguments: String,
    },
    /// An output item is complete.
    #[serde(rename = "response.output_item.done")]
    OutputItemDone {
        /// Its index in `output`.
        output_index: u32,
        /// The whole item.
        item: OutputItem,
    },
    /// The end: the whole response.
    #[serde(rename = "response.completed")]
    Completed {
        /// The response.
        response: Response,
    },
    /// The end of a response cut short by `max_output_tokens`.
    #[serde(rename = "response.incomplete")]
    Incomplete {
        /// The response.
        response: Response,
    },
    /// A failure after the stream started.
    #[serde(rename = "error")]
    Error {
        /// Machine-readable code.
        code: Option<String>,
        /// What happened.
        message: String,
        /// The field at fault.
        param: Option<String>,
    },
}

impl EventKind {
    /// The SSE `event:` name (the same as `type`).
    pub fn name(&self) -> &'static str {
        match self {
            Self::Created { .. } => "response.created",
            Self::InProgress { .. } => "response.in_progress",
            Self::OutputItemAdded { .. } => "response.output_item.added",
            Self::ContentPartAdded { .. } => "response.content_part.added",
            Self::OutputTextDelta { .. } => "response.output_text.delta",
            Self::OutputTextDone { .. } => "response.output_text.done",
            Self::ContentPartDone { .. } => "response.content_part.done",
            Self::FunctionCallArgumentsDelta { .. } => "response.function_call_arguments.delta",
            Self::FunctionCallArgumentsDone { .. } => "response.function_call_arguments.done",
            Self::OutputItemDone { .. } => "response.output_item.done",
            Self::Completed { .. } => "response.completed",
            Self::Incomplete { .. } => "response.incomplete",
            Self::Error { .. } => "error",
        }
    }
}

/// One stream event: its kind and its place in the stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResponseEvent {
    /// 0, 1, 2, ... over the stream.
    pub sequence_number: u64,
    /// What it says.
    #[serde(flatten)]
    pub kind: EventKind,
}

/// Answer of `DELETE /v1/responses/{id}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResponseDeleted {
    /// The id.
    pub id: String,
    /// Always `"response"`.
    pub object: String,
    /// Always true.
    pub deleted: bool,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn events_carry_type_and_sequence_number() {
        let e = ResponseEvent {
            sequence_number: 3,
            kind: EventKind::FunctionCallArgumentsDelta {
                item_id: "fc_1".into(),
                output_index: 0,
                delta: "{\"a\"".into(),
            },
        };
        assert_eq!(
            serde_json::to_value(&e).unwrap(),
            json!({"type": "response.function_call_arguments.delta", "sequence_number": 3,
                   "item_id": "fc_1", "output_index": 0, "delta": "{\"a\""})
        );
        assert_eq!(e.kind.name(), "response.function_call_arguments.delta");
        let item = OutputItem::FunctionCall {
            id: "fc_1".into(),
            call_id: "call_1".into(),
            name: "f".into(),
            arguments: "{}".into(),
            status: "completed".into(),
        };
        assert_eq!(
            serde_json::to_value(&item).unwrap()["type"],
            "function_call"
        );
    }
}
