//! `JsonBody<T>`: the request-body extractor. Unlike axum's `Json` it answers in the OpenAI
//! error shape: 413 over the size limit, 408 past the body deadline, 400 for malformed JSON, and
//! for a field of the wrong type a 400 whose `param` names that field.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use serde_json::{Map, Value};

use crate::error::ApiError;
pub use crate::http::wire_request::WireRequest;
use crate::prepare::validation_error::ValidationError;
use crate::state::AppState;

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
