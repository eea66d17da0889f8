//! Wire types shared by the server, the router and the bench client: request and response
//! bodies of the OpenAI APIs (chat, completions, responses) and of Anthropic's Messages API
//! (serde only, no validation), SSE framing and an incremental SSE parser, and the error bodies.
//!
//! Requests keep unknown keys in an `extra` map instead of rejecting them at parse time, so the
//! server can answer 400 naming the exact field. Responses serialize like OpenAI's: fields that
//! OpenAI sends as `null` are kept, fields it omits are skipped when `None`.
#![deny(missing_docs)]

pub mod anthropic;
pub mod chat;
pub mod common;
pub mod completions;
pub mod embeddings;
pub mod error;
pub mod models;
pub mod responses;
pub mod sse;
pub mod tokenize;

pub use chat::{
    ChatChoice, ChatChunkChoice, ChatCompletionChunk, ChatCompletionRequest,
    ChatCompletionResponse, ChatDelta, ChatLogprobs, ChatMessage, ChatTokenLogprob, ContentPart,
    FunctionCall, FunctionCallDelta, MessageContent, Role, ToolCall, ToolCallDelta, TopLogprob,
};
pub use common::{
    FinishReason, Prompt, PromptLogprob, PromptLogprobs, PromptTokensDetails, Stop, StopReason,
    StreamOptions, Usage,
};
pub use completions::{
    CompletionChoice, CompletionLogprobs, CompletionRequest, CompletionResponse,
    CompletionStreamChunk, TopLogprobMap,
};
pub use embeddings::{
    Embedding, EmbeddingRequest, EmbeddingResponse, EmbeddingUsage, EmbeddingVector,
};
pub use error::{ErrorBody, ErrorResponse};
pub use models::{ModelCard, ModelList};
pub use sse::{SseEvent, SseParser};
pub use tokenize::{DetokenizeRequest, DetokenizeResponse, TokenizeRequest, TokenizeResponse};
