//! `/v1/chat/completions`: the request (OpenAI fields plus vLLM's extensions), messages with
//! string or content-part content and tool calls, the response, the stream chunk with its delta,
//! and the chat logprobs form `{content: [{token, logprob, bytes, top_logprobs}]}`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::common::{FinishReason, PromptLogprobs, Stop, StopReason, StreamOptions, Usage};

/// Author of a chat message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions from the application.
    System,
    /// OpenAI's newer name for system instructions.
    Developer,
    /// The end user.
    User,
    /// The model.
    Assistant,
    /// A tool result (carries `tool_call_id`).
    Tool,
}

impl Role {
    /// The wire name (`"user"`, ...), as chat templates expect it.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::Developer => "developer",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

/// `content` of a message: a string or an array of content parts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MessageContent {
    /// `"content": "Hello"`.
    Text(String),
    /// `"content": [{"type": "text", "text": "Hello"}]`.
    Parts(Vec<ContentPart>),
}

impl From<&str> for MessageContent {
    fn from(s: &str) -> Self {
        MessageContent::Text(s.to_owned())
    }
}

impl From<String> for MessageContent {
    fn from(s: String) -> Self {
        MessageContent::Text(s)
    }
}

/// One element of an array `content`. Kept loose (`type` as a string, other keys in `extra`) so
/// an unsupported part such as `image_url` parses and the server can reject it by name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContentPart {
    /// `"text"` is the only type pagoda serves; others are parsed to be rejected.
    #[serde(rename = "type")]
    pub kind: String,
    /// The text of a `"text"` part.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Every other key of the part (`image_url`, `input_audio`, ...).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ContentPart {
    /// `{"type": "text", "text": text}`.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            kind: "text".to_owned(),
            text: Some(text.into()),
            extra: Map::new(),
        }
    }
}

/// A chat message, in requests (`messages`) and in responses (`choices[].message`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// Author.
    pub role: Role,
    /// Content; `null` for an assistant message that only calls tools.
    #[serde(default)]
    pub content: Option<MessageContent>,
    /// Optional participant name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Tool calls made by an assistant message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
    /// The call a `tool` message answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// vLLM / DeepSeek: reasoning text of an assistant message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// Other keys (`refusal`, `annotations`, `audio`, ...), for the server to judge.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ChatMessage {
    /// A message with string content and nothing else.
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        Self {
            role,
            content: Some(MessageContent::Text(content.into())),
            name: None,
            tool_calls: None,
            tool_call_id: None,
            reasoning_content: None,
            extra: Map::new(),
        }
    }
}

/// A complete tool call in a message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// `call_...`.
    pub id: String,
    /// Always `"function"`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Function name and JSON arguments.
    pub function: FunctionCall,
}

/// `function` of a tool call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionCall {
    /// Function name.
    pub name: String,
    /// Arguments as a JSON-encoded string.
    pub arguments: String,
}

/// A piece of a tool call in a stream delta: the first piece has `id`, `type` and the name;
/// later pieces carry argument fragments for the same `index`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCallDelta {
    /// Which tool call of the choice this piece extends.
    pub index: u32,
    /// Set on the first piece.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// `"function"`, on the first piece.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Name and/or argument fragment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<FunctionCallDelta>,
}

/// `function` of a tool call delta.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionCallDelta {
    /// Set on the first piece.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A fragment of the JSON arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<String>,
}

/// Body of `POST /v1/chat/completions`.
///
/// Every optional field is `Option` so the server can tell "absent" from a default. Unknown keys
/// land in `extra` (the server rejects them naming the key).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatCompletionRequest {
    /// Model id, as listed by `/v1/models`.
    pub model: String,
    /// The conversation so far.
    pub messages: Vec<ChatMessage>,
    /// Penalty on tokens by how often they already occur, in [-2, 2].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frequency_penalty: Option<f32>,
    /// Token id (as a string) -> bias added to its logit, in [-100, 100].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logit_bias: Option<BTreeMap<String, f32>>,
    /// Return the log probability of each output token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<bool>,
    /// Alternatives per token (0..=20), needs `logprobs: true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_logprobs: Option<u32>,
    /// Deprecated by OpenAI in favour of `max_completion_tokens`; still widely sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Maximum tokens to generate per choice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_completion_tokens: Option<u32>,
    /// Choices to generate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<u32>,
    /// Penalty on tokens that already occur, in [-2, 2].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub presence_penalty: Option<f32>,
    /// `{"type": "text" | "json_object" | "json_schema", "json_schema": {...}}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_format: Option<Value>,
    /// Seed for reproducible sampling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Stop sequences.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<Stop>,
    /// Stream the answer as SSE chunks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    /// Options for streaming (`include_usage`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<StreamOptions>,
    /// Sampling temperature; 0 means greedy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// Nucleus sampling mass, in (0, 1].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f32>,
    /// Tool definitions (`[{"type": "function", "function": {...}}]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Value>,
    /// `"none" | "auto" | "required" | {"type": "function", "function": {"name": ...}}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<Value>,
    /// Allow several tool calls in one turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel_tool_calls: Option<bool>,
    /// End-user id (recorded, otherwise unused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// OpenAI: store the completion for distillation (accepted, ignored).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<bool>,
    /// OpenAI: key-value tags for stored completions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
    /// OpenAI: processing tier (`"auto"`, `"default"`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_tier: Option<String>,
    /// OpenAI: reasoning effort of reasoning models.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<String>,
    /// OpenAI: output modalities (`["text"]`, `["text", "audio"]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modalities: Option<Vec<String>>,
    /// OpenAI: audio output parameters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audio: Option<Value>,
    /// OpenAI: predicted output for speculative decoding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prediction: Option<Value>,
    /// OpenAI: web search options.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub web_search_options: Option<Value>,
    /// Deprecated OpenAI function definitions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub functions: Option<Value>,
    /// Deprecated OpenAI function choice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function_call: Option<Value>,

    // ---- vLLM extensions ----
    /// vLLM: keep only the k most likely tokens (-1 or 0 disables).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<i32>,
    /// vLLM: drop tokens below `min_p` times the top probability.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_p: Option<f32>,
    /// vLLM: multiplicative repetition penalty (1 = off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repetition_penalty: Option<f32>,
    /// vLLM: keep generating past EOS (benchmarks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_eos: Option<bool>,
    /// vLLM: do not stop before this many tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_tokens: Option<u32>,
    /// vLLM: extra stop token ids.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_token_ids: Option<Vec<u32>>,
    /// vLLM: scheduling priority (lower runs first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// vLLM: salt mixed into prefix-cache hashes so tenants do not share cache entries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_salt: Option<String>,
    /// vLLM: prefill/decode disaggregation (its NixlConnector's shape): `{"do_remote_decode":
    /// true, "transfer_id", "remote_host", "remote_port"}` on a prefill replica,
    /// `{"do_remote_prefill": true, "transfer_id"}` on a decode replica (docs/scale-out.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_transfer_params: Option<serde_json::Value>,
    /// pagoda: this request's speculative decoding, within the server's: `false` turns it off,
    /// `{"method": "ngram"|"suffix"|"suffix+ngram"|"draft_model", "num_speculative_tokens": K}`
    /// caps K (the method must be the one the server runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speculative: Option<serde_json::Value>,
    /// vLLM: drop special tokens from the text (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_special_tokens: Option<bool>,
    /// vLLM: put spaces between special tokens when detokenizing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spaces_between_special_tokens: Option<bool>,
    /// vLLM: keep the matched stop string in the output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_stop_str_in_output: Option<bool>,
    /// vLLM: number of top log probabilities per prompt token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_logprobs: Option<u32>,
    /// vLLM: constrained decoding (`json`, `regex`, `choice`, `grammar`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured_outputs: Option<Value>,
    /// vLLM: echo the last message if it has the assistant role.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub echo: Option<bool>,
    /// vLLM: end the prompt with the assistant header (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub add_generation_prompt: Option<bool>,
    /// vLLM: continue the final (assistant) message instead of opening a new one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continue_final_message: Option<bool>,
    /// vLLM: add special tokens when tokenizing the rendered template (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub add_special_tokens: Option<bool>,
    /// vLLM: a Jinja chat template overriding the model's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat_template: Option<String>,
    /// vLLM: extra variables for the chat template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat_template_kwargs: Option<Map<String, Value>>,

    /// Ollama's: how long the model stays loaded after this request (seconds, or a duration
    /// such as `"5m"`; 0 unloads it after the request, negative keeps it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_alive: Option<Value>,
    /// Keys not listed above, kept so the server can name them in its 400.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ChatCompletionRequest {
    /// Every top-level key this type reads; any other lands in `extra` (the server's field
    /// policy suggests the nearest of these for a misspelt one).
    pub const FIELDS: &'static [&'static str] = &[
        "keep_alive",
        "model",
        "messages",
        "frequency_penalty",
        "logit_bias",
        "logprobs",
        "top_logprobs",
        "max_tokens",
        "max_completion_tokens",
        "n",
        "presence_penalty",
        "response_format",
        "seed",
        "stop",
        "stream",
        "stream_options",
        "temperature",
        "top_p",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "user",
        "store",
        "metadata",
        "service_tier",
        "reasoning_effort",
        "modalities",
        "audio",
        "prediction",
        "web_search_options",
        "functions",
        "function_call",
        "top_k",
        "min_p",
        "repetition_penalty",
        "ignore_eos",
        "min_tokens",
        "stop_token_ids",
        "priority",
        "cache_salt",
        "kv_transfer_params",
        "speculative",
        "skip_special_tokens",
        "spaces_between_special_tokens",
        "include_stop_str_in_output",
        "prompt_logprobs",
        "structured_outputs",
        "echo",
        "add_generation_prompt",
        "continue_final_message",
        "add_special_tokens",
        "chat_template",
        "chat_template_kwargs",
    ];
}

/// Body of a non-streaming chat answer (`object: "chat.completion"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatCompletionResponse {
    /// `chatcmpl-...`.
    pub id: String,
    /// Always `"chat.completion"`.
    pub object: String,
    /// Unix seconds.
    pub created: u64,
    /// Model id.
    pub model: String,
    /// One per choice.
    pub choices: Vec<ChatChoice>,
    /// Token counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// Backend configuration fingerprint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_fingerprint: Option<String>,
    /// OpenAI: the tier that served the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_tier: Option<String>,
    /// vLLM: per prompt token (the first is `null`), its logprob and the top alternatives.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_logprobs: Option<Vec<Option<PromptLogprobs>>>,
}

impl ChatCompletionResponse {
    /// The `object` value of chat responses.
    pub const OBJECT: &'static str = "chat.completion";
}

/// One choice of a chat answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatChoice {
    /// Choice index.
    pub index: u32,
    /// The assistant message.
    pub message: ChatMessage,
    /// Log probabilities when requested; OpenAI sends `null` otherwise.
    #[serde(default)]
    pub logprobs: Option<ChatLogprobs>,
    /// Why generation stopped.
    #[serde(default)]
    pub finish_reason: Option<FinishReason>,
    /// vLLM: the stop string or token that matched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<StopReason>,
}

/// One SSE chunk of a streaming chat answer (`object: "chat.completion.chunk"`). The final
/// usage chunk (with `stream_options.include_usage`) has empty `choices`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatCompletionChunk {
    /// Same id on every chunk of a request.
    pub id: String,
    /// Always `"chat.completion.chunk"`.
    pub object: String,
    /// Unix seconds.
    pub created: u64,
    /// Model id.
    pub model: String,
    /// Deltas; empty on the usage chunk.
    pub choices: Vec<ChatChunkChoice>,
    /// Present on the final usage chunk only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// Backend configuration fingerprint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_fingerprint: Option<String>,
    /// OpenAI: the tier that served the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_tier: Option<String>,
}

impl ChatCompletionChunk {
    /// The `object` value of chat stream chunks.
    pub const OBJECT: &'static str = "chat.completion.chunk";
}

/// One choice of a chat stream chunk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatChunkChoice {
    /// Choice index.
    pub index: u32,
    /// What this chunk adds.
    pub delta: ChatDelta,
    /// Log probabilities of the tokens in this delta, when requested.
    #[serde(default)]
    pub logprobs: Option<ChatLogprobs>,
    /// Set on the last chunk of the choice; `null` before.
    #[serde(default)]
    pub finish_reason: Option<FinishReason>,
    /// vLLM: the stop string or token that matched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<StopReason>,
}

/// `delta` of a chat stream chunk: the role on the first chunk, then content pieces.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatDelta {
    /// `"assistant"` on the first chunk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    /// A piece of text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// vLLM / DeepSeek: a piece of reasoning text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// Pieces of tool calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCallDelta>>,
}

/// Chat logprobs: one entry per output token.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatLogprobs {
    /// Per-token log probabilities of the content.
    #[serde(default)]
    pub content: Option<Vec<ChatTokenLogprob>>,
}

/// Log probability of one output token and its top alternatives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatTokenLogprob {
    /// Token text.
    pub token: String,
    /// Natural log of its probability.
    pub logprob: f32,
    /// UTF-8 bytes of the token (tokens may split characters); `null` if none.
    #[serde(default)]
    pub bytes: Option<Vec<u8>>,
    /// The most likely tokens at this position, most likely first.
    #[serde(default)]
    pub top_logprobs: Vec<TopLogprob>,
}

/// One alternative in `top_logprobs`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopLogprob {
    /// Token text.
    pub token: String,
    /// Natural log of its probability.
    pub logprob: f32,
    /// UTF-8 bytes of the token; `null` if none.
    #[serde(default)]
    pub bytes: Option<Vec<u8>>,
}
