//! Which error body an API answers with: OpenAI's `{"error": {...}}`, Anthropic's
//! `{"type": "error", "error": {"type", "message"}}` or text-embeddings-inference's
//! `{"error", "error_type"}` (`/embed`). Every refusal is an `ApiError` (a 400 is a
//! `ValidationError` first); this is the one place it is rendered for the API that was called.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use pagoda_protocol::anthropic::AnthropicError;
use pagoda_protocol::sse;
use pagoda_protocol::tei::TeiError;

use crate::error::ApiError;

/// An API's error dialect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorShape {
    OpenAi,
    Anthropic,
    Tei,
}

impl ErrorShape {
    /// The dialect of the route at `path` (for errors raised before a handler runs: auth).
    pub fn for_path(path: &str) -> Self {
        if path == "/v1/messages" || path.starts_with("/v1/messages/") {
            Self::Anthropic
        } else if path == "/embed" {
            Self::Tei
        } else {
            Self::OpenAi
        }
    }

    /// The HTTP answer.
    pub fn response(self, e: ApiError) -> Response {
        match self {
            Self::OpenAi => e.into_response(),
            Self::Anthropic => (e.status, Json(anthropic(&e))).into_response(),
            Self::Tei => {
                let (status, body) = tei(&e);
                (status, Json(body)).into_response()
            }
        }
    }

    /// The error as an event, for a failure after the stream's headers went out.
    pub fn stream_event(self, e: &ApiError) -> String {
        match self {
            Self::OpenAi | Self::Tei => sse::encode_error(&e.body),
            Self::Anthropic => sse::encode_event("error", &anthropic(e)).unwrap_or_else(|_| {
                "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"internal error\"}}\n\n".to_owned()
            }),
        }
    }
}

/// TEI's status and `error_type` for an error whose status was chosen by `error/mapping.rs`
/// (where a refused `/embed` request already got TEI's 400, 413 or 422): TEI answers a failed
/// backend with 424.
fn tei(e: &ApiError) -> (StatusCode, TeiError) {
    let (status, kind) = match e.status {
        StatusCode::BAD_REQUEST => (e.status, "empty"),
        StatusCode::TOO_MANY_REQUESTS => (e.status, "overloaded"),
        StatusCode::SERVICE_UNAVAILABLE => (e.status, "unhealthy"),
        s if s.is_server_error() => (StatusCode::FAILED_DEPENDENCY, "backend"),
        s => (s, "validation"),
    };
    let body = TeiError {
        error: e.body.error.message.clone(),
        error_type: kind.to_owned(),
    };
    (status, body)
}

fn anthropic(e: &ApiError) -> AnthropicError {
    AnthropicError::for_status(e.status.as_u16(), e.body.error.message.clone())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn paths_pick_the_dialect() {
        assert_eq!(ErrorShape::for_path("/v1/messages"), ErrorShape::Anthropic);
        assert_eq!(
            ErrorShape::for_path("/v1/messages/count_tokens"),
            ErrorShape::Anthropic
        );
        assert_eq!(ErrorShape::for_path("/v1/messagesx"), ErrorShape::OpenAi);
        assert_eq!(ErrorShape::for_path("/v1/responses"), ErrorShape::OpenAi);
        assert_eq!(ErrorShape::for_path("/embed"), ErrorShape::Tei);
        let ev = ErrorShape::Anthropic.stream_event(&ApiError::overloaded("busy"));
        assert!(
            ev.starts_with("event: error\ndata: {\"type\":\"error\""),
            "{ev}"
        );
        assert!(ev.contains("rate_limit_error"), "{ev}");
    }
}
