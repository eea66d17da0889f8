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
pub mod rerank;
pub mod responses;
pub mod score;
pub mod sse;
pub mod tei;
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
pub use models::{ModelCard, ModelList, ParallelLayout, RankCard};
pub use rerank::{
    RerankDocument, RerankRequest, RerankResponse, RerankResult, RerankResultDocument, RerankUsage,
};
pub use score::{ScoreData, ScoreRequest, ScoreResponse, ScoreTexts};
pub use sse::{SseEvent, SseParser};
pub use tokenize::{DetokenizeRequest, DetokenizeResponse, TokenizeRequest, TokenizeResponse};

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod fields_tests {
    use serde::de::DeserializeOwned;
    use serde_json::{Map, Value, json};

    use super::anthropic::{CountTokensRequest, MessagesRequest};
    use super::responses::ResponsesRequest;
    use super::*;

    /// Every name in `fields` is a typed field: `base` plus `name: null` leaves `extra` empty.
    fn all_known<T: DeserializeOwned>(
        fields: &[&str],
        base: Value,
        extra: impl Fn(&T) -> &Map<String, Value>,
    ) {
        for f in fields {
            let mut body = base.clone();
            if body.get(*f).is_none() {
                body[*f] = Value::Null;
            }
            let req: T = serde_json::from_value(body).unwrap();
            assert!(extra(&req).is_empty(), "`{f}` is not a field of its type");
        }
    }

    #[test]
    fn the_field_lists_name_typed_fields() {
        let chat = json!({"model": "m", "messages": []});
        all_known(
            ChatCompletionRequest::FIELDS,
            chat,
            |r: &ChatCompletionRequest| &r.extra,
        );
        let comp = json!({"model": "m", "prompt": "x"});
        all_known(CompletionRequest::FIELDS, comp, |r: &CompletionRequest| {
            &r.extra
        });
        let msgs = json!({"model": "m", "messages": [], "max_tokens": 1});
        all_known(MessagesRequest::FIELDS, msgs, |r: &MessagesRequest| {
            &r.extra
        });
        let count = json!({"model": "m", "messages": []});
        all_known(
            CountTokensRequest::FIELDS,
            count,
            |r: &CountTokensRequest| &r.extra,
        );
        let resp = json!({"model": "m"});
        all_known(ResponsesRequest::FIELDS, resp, |r: &ResponsesRequest| {
            &r.extra
        });
        let emb = json!({"model": "m", "input": "x"});
        all_known(EmbeddingRequest::FIELDS, emb, |r: &EmbeddingRequest| {
            &r.extra
        });
        all_known(TokenizeRequest::FIELDS, json!({}), |r: &TokenizeRequest| {
            &r.extra
        });
        let tei = json!({"inputs": "x"});
        all_known(
            tei::TeiEmbedRequest::FIELDS,
            tei,
            |r: &tei::TeiEmbedRequest| &r.extra,
        );
        let rerank = json!({"model": "m", "query": "q", "documents": []});
        all_known(RerankRequest::FIELDS, rerank, |r: &RerankRequest| &r.extra);
        let score = json!({"model": "m", "text_1": "a", "text_2": "b"});
        all_known(ScoreRequest::FIELDS, score, |r: &ScoreRequest| &r.extra);
        let tei_rerank = json!({"query": "q", "texts": []});
        all_known(
            tei::TeiRerankRequest::FIELDS,
            tei_rerank,
            |r: &tei::TeiRerankRequest| &r.extra,
        );
        let detok = json!({"tokens": []});
        all_known(DetokenizeRequest::FIELDS, detok, |r: &DetokenizeRequest| {
            &r.extra
        });
    }
}
