//! The OpenAI error body `{"error": {"message", "type", "param", "code"}}` and constructors for
//! the kinds pagoda returns. The HTTP status is the server's business; `type` follows OpenAI.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

/// Body of every non-2xx answer, and of an SSE error event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorResponse {
    /// The error.
    pub error: ErrorBody,
}

/// `error` of an [`ErrorResponse`]. `param` and `code` are sent as `null` when absent, as
/// OpenAI does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// Human-readable; names the offending field and the bound.
    pub message: String,
    /// `invalid_request_error`, `not_found_error`, `server_error`, ...
    #[serde(rename = "type")]
    pub kind: String,
    /// The request field at fault.
    #[serde(default)]
    pub param: Option<String>,
    /// Machine-readable code. OpenAI sends strings; vLLM sends the HTTP status as a number,
    /// which is read here as its decimal string.
    #[serde(default, deserialize_with = "string_or_number")]
    pub code: Option<String>,
}

fn string_or_number<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::Null => None,
        Value::String(s) => Some(s),
        other => Some(other.to_string()),
    })
}

impl ErrorResponse {
    /// An error of any kind.
    pub fn new(
        kind: impl Into<String>,
        message: impl Into<String>,
        param: Option<&str>,
        code: Option<&str>,
    ) -> Self {
        Self {
            error: ErrorBody {
                message: message.into(),
                kind: kind.into(),
                param: param.map(str::to_owned),
                code: code.map(str::to_owned),
            },
        }
    }

    /// 400: a malformed or out-of-range request; `param` names the field.
    pub fn invalid_request(message: impl Into<String>, param: Option<&str>) -> Self {
        Self::new("invalid_request_error", message, param, None)
    }

    /// 400: a request key pagoda does not know, worded as OpenAI does.
    pub fn unknown_parameter(name: &str) -> Self {
        Self::new(
            "invalid_request_error",
            format!("Unrecognized request argument supplied: {name}"),
            Some(name),
            Some("unknown_parameter"),
        )
    }

    /// 400: an unknown key like [`Self::unknown_parameter`], with the known name it is close
    /// to (`temprature` -> `temperature`) when there is one.
    pub fn unknown_parameter_near(name: &str, near: Option<&str>) -> Self {
        let mut e = Self::unknown_parameter(name);
        if let Some(n) = near {
            e.error.message.push_str(&format!("; did you mean `{n}`?"));
        }
        e
    }

    /// 400: a known parameter that pagoda does not support (yet).
    pub fn unsupported_parameter(name: &str, why: &str) -> Self {
        Self::new(
            "invalid_request_error",
            format!("`{name}` is not supported: {why}"),
            Some(name),
            Some("unsupported_parameter"),
        )
    }

    /// 404: the requested model is not served here.
    pub fn model_not_found(model: &str) -> Self {
        Self::new(
            "invalid_request_error",
            format!("The model `{model}` does not exist."),
            Some("model"),
            Some("model_not_found"),
        )
    }

    /// 404: no such route.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new("not_found_error", message, None, None)
    }

    /// 401: missing or wrong API key.
    pub fn authentication(message: impl Into<String>) -> Self {
        Self::new(
            "authentication_error",
            message,
            None,
            Some("invalid_api_key"),
        )
    }

    /// 429: the server is at capacity.
    pub fn overloaded(message: impl Into<String>) -> Self {
        Self::new(
            "rate_limit_error",
            message,
            None,
            Some("rate_limit_exceeded"),
        )
    }

    /// 500: a bug or engine failure.
    pub fn server_error(message: impl Into<String>) -> Self {
        Self::new("server_error", message, None, None)
    }
}

impl std::fmt::Display for ErrorResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.error.kind, self.error.message)
    }
}
