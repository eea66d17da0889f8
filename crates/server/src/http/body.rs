//! `JsonBody<T>`: the request-body extractor. Unlike axum's `Json` it answers in the OpenAI
//! error shape: 413 over the size limit, 408 past the body deadline, 400 for malformed JSON, and
//! for a field of the wrong type a 400 whose `param` names that field.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::error::ApiError;
use crate::prepare::validation_error::ValidationError;
use crate::state::AppState;

/// A request body type, with the smallest valid body (used to find which field fails), and
/// the model it names (`None`: the server's default model) with how long to keep it loaded.
pub trait WireRequest: DeserializeOwned {
    /// Required fields only, as JSON.
    const MINIMAL: &'static str;

    fn model(&self) -> Option<&str> {
        None
    }

    fn keep_alive(&self) -> Option<&Value> {
        None
    }
}

/// A request type with `model` (a string, or optional) and `keep_alive`.
macro_rules! wire {
    ($t:ty, $minimal:literal, model) => {
        impl WireRequest for $t {
            const MINIMAL: &'static str = $minimal;
            fn model(&self) -> Option<&str> {
                Some(&self.model)
            }
            fn keep_alive(&self) -> Option<&Value> {
                self.keep_alive.as_ref()
            }
        }
    };
    ($t:ty, $minimal:literal, optional model) => {
        impl WireRequest for $t {
            const MINIMAL: &'static str = $minimal;
            fn model(&self) -> Option<&str> {
                self.model.as_deref()
            }
        }
    };
    ($t:ty, $minimal:literal) => {
        impl WireRequest for $t {
            const MINIMAL: &'static str = $minimal;
        }
    };
}

wire!(
    pagoda_protocol::CompletionRequest,
    r#"{"model":"m","prompt":"p"}"#,
    model
);
wire!(
    pagoda_protocol::ChatCompletionRequest,
    r#"{"model":"m","messages":[]}"#,
    model
);
wire!(
    pagoda_protocol::anthropic::MessagesRequest,
    r#"{"model":"m","messages":[],"max_tokens":1}"#,
    model
);
wire!(
    pagoda_protocol::responses::ResponsesRequest,
    r#"{"model":"m"}"#,
    model
);
wire!(
    pagoda_protocol::EmbeddingRequest,
    r#"{"model":"m","input":"i"}"#,
    model
);
impl WireRequest for pagoda_protocol::anthropic::CountTokensRequest {
    const MINIMAL: &'static str = r#"{"model":"m","messages":[]}"#;
    fn model(&self) -> Option<&str> {
        Some(&self.model)
    }
}
wire!(pagoda_protocol::TokenizeRequest, "{}", optional model);
wire!(pagoda_protocol::DetokenizeRequest, r#"{"tokens":[]}"#, optional model);
wire!(pagoda_protocol::tei::TeiEmbedRequest, r#"{"inputs":"i"}"#);
impl WireRequest for pagoda_protocol::RerankRequest {
    const MINIMAL: &'static str = r#"{"query":"q","documents":[]}"#;
    fn model(&self) -> Option<&str> {
        Some(&self.model)
    }
}
impl WireRequest for pagoda_protocol::ScoreRequest {
    const MINIMAL: &'static str = r#"{"text_1":"a","text_2":"b"}"#;
    fn model(&self) -> Option<&str> {
        Some(&self.model)
    }
}
impl WireRequest for pagoda_protocol::tei::AnyRerankRequest {
    const MINIMAL: &'static str = r#"{"query":"q","texts":[]}"#;
    fn model(&self) -> Option<&str> {
        match self {
            Self::Tei(_) => None,
            Self::Cohere(r) => Some(&r.model),
        }
    }
}

/// A parsed JSON body.
pub struct JsonBody<T>(pub T);

impl<T: WireRequest> FromRequest<AppState> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let limit = state.config().max_request_bytes;
        // One deadline for the whole body: the listener runs no timer while a request is in
        // flight, and a per-read timeout would let a body trickle in a byte at a time forever.
        let deadline = state.config().request_body_timeout;
        let read = tokio::time::timeout(deadline, Bytes::from_request(req, state))
            .await
            .map_err(|_| ApiError::body_timeout(deadline))?;
        let bytes = read.map_err(|e| {
            if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::too_large(limit)
            } else {
                ValidationError::body(None, format!("cannot read the request body: {e}")).into()
            }
        })?;
        Ok(parse(&bytes).map(JsonBody)?)
    }
}

/// Parses `bytes` as `T`, naming the offending field when one has the wrong type or is missing.
pub fn parse<T: WireRequest>(bytes: &[u8]) -> Result<T, ValidationError> {
    let value: Value = serde_json::from_slice(bytes)
        .map_err(|e| ValidationError::body(None, format!("the body is not valid JSON: {e}")))?;
    let Value::Object(obj) = &value else {
        return Err(ValidationError::body(
            None,
            "the body must be a JSON object",
        ));
    };
    match T::deserialize(&value) {
        Ok(t) => Ok(t),
        Err(e) => Err(match bad_field::<T>(obj) {
            Some(field) => {
                let message = format!("`{field}`: {}", explain(&e));
                ValidationError::body(Some(field), message)
            }
            None => {
                // A required field is missing: serde names it, and so does `param`.
                let msg = explain(&e);
                let missing = msg
                    .strip_prefix("missing field `")
                    .and_then(|rest| rest.split('`').next())
                    .map(str::to_owned);
                ValidationError::body(missing, format!("invalid request: {msg}"))
            }
        }),
    }
}

/// The first key of `obj` that fails on its own (added to the minimal valid body).
fn bad_field<T: WireRequest>(obj: &Map<String, Value>) -> Option<String> {
    let Ok(Value::Object(minimal)) = serde_json::from_str::<Value>(T::MINIMAL) else {
        return None;
    };
    for (key, v) in obj {
        let mut probe = minimal.clone();
        probe.insert(key.clone(), v.clone());
        if T::deserialize(&Value::Object(probe)).is_err() {
            return Some(key.clone());
        }
    }
    // A required field is missing: serde says which.
    None
}

/// Serde's message, with its untagged-enum wording replaced by the accepted shapes.
fn explain(e: &serde_json::Error) -> String {
    let msg = e.to_string();
    let shapes = [
        (
            "enum Prompt",
            "expected a string, an array of strings, an array of token ids or an array of token-id arrays",
        ),
        ("enum Stop", "expected a string or an array of strings"),
        (
            "enum MessageContent",
            "expected a string or an array of content parts",
        ),
        (
            "enum BlockContent",
            "expected a string or an array of content blocks",
        ),
        (
            "enum ResponseInput",
            "expected a string or an array of input items",
        ),
        (
            "enum RerankDocument",
            "expected a string or an object with a `text` string",
        ),
        (
            "enum ScoreTexts",
            "expected a string or an array of strings",
        ),
        (
            "enum AnyRerankRequest",
            "expected TEI's `query` and `texts`, or vLLM's `query` and `documents`",
        ),
    ];
    for (needle, text) in shapes {
        if msg.contains(needle) {
            return text.to_owned();
        }
    }
    msg
}

#[cfg(test)]
mod tests {
    use pagoda_protocol::{ChatCompletionRequest, CompletionRequest};

    use super::*;

    #[test]
    fn wrong_type_names_the_field() {
        let e = parse::<CompletionRequest>(br#"{"model":"m","prompt":"x","temperature":"hot"}"#)
            .err()
            .map(|e| ApiError::from(e).body.error.param);
        assert_eq!(e, Some(Some("temperature".to_owned())));
        let e = parse::<CompletionRequest>(br#"{"model":"m","prompt":{"a":1}}"#).err();
        let body = e.map(|e| ApiError::from(e).body.error).expect("error");
        assert_eq!(body.param.as_deref(), Some("prompt"));
        assert!(body.message.contains("token ids"), "{}", body.message);
        let e = parse::<pagoda_protocol::RerankRequest>(br#"{"query":"q","documents":[3]}"#).err();
        let body = e.map(|e| ApiError::from(e).body.error).expect("error");
        assert_eq!(body.param.as_deref(), Some("documents"));
        assert!(body.message.contains("`text`"), "{}", body.message);
    }

    #[test]
    fn malformed_and_missing() {
        let e = ApiError::from(parse::<ChatCompletionRequest>(b"{not json").expect_err("error"));
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert!(e.body.error.message.contains("not valid JSON"));
        let e =
            ApiError::from(parse::<ChatCompletionRequest>(br#"{"model":"m"}"#).expect_err("error"));
        assert!(
            e.body.error.message.contains("messages"),
            "{}",
            e.body.error.message
        );
        assert_eq!(e.body.error.param.as_deref(), Some("messages"));
    }
}
