//! `ApiError`: every way a request can fail, as an HTTP status plus the OpenAI error body
//! `{"error": {"message", "type", "param", "code"}}`. Handlers return it; axum renders it. A
//! request refused as sent (400) is a `ValidationError`, turned into this in one place.

pub mod mapping;
pub mod rejected;
pub mod shape;

use axum::Json;
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use pagoda_protocol::ErrorResponse;

/// A failed request: the status to answer with and the OpenAI-shaped body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{status}: {body}")]
pub struct ApiError {
    pub status: StatusCode,
    pub body: ErrorResponse,
    /// Seconds for the `Retry-After` header (a tenant over one of its limits).
    pub retry_after: Option<u64>,
}

impl ApiError {
    /// Private to `error`: every status and body is chosen by a named constructor here or by
    /// the mapping in `mapping.rs`, so no handler invents its own.
    fn new(status: StatusCode, body: ErrorResponse) -> Self {
        Self {
            status,
            body,
            retry_after: None,
        }
    }

    /// 404: the request names a model this server does not serve.
    pub fn model_not_found(model: &str) -> Self {
        Self::new(StatusCode::NOT_FOUND, ErrorResponse::model_not_found(model))
    }

    /// 400 outside a generation request's validation (an admin endpoint's body, a limit no
    /// request could pass): OpenAI's `invalid_request_error`, naming `param` when there is one.
    pub fn bad_request(message: impl Into<String>, param: Option<&str>) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            ErrorResponse::invalid_request(message, param),
        )
    }

    /// 404 for something a request names that is not there (a LoRA adapter not loaded), as an
    /// `invalid_request_error` naming `param`.
    pub fn not_found(message: impl Into<String>, param: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            ErrorResponse::invalid_request(message, Some(param)),
        )
    }

    /// 404 for a path with no route.
    pub fn no_route(path: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            ErrorResponse::not_found(format!("no route for {path}")),
        )
    }

    /// 405: the path exists, but not for this method (the router adds the `Allow` header).
    pub fn method_not_allowed(method: &Method, path: &str) -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            ErrorResponse::new(
                "invalid_request_error",
                format!("method {method} is not allowed for {path}"),
                None,
                Some("method_not_allowed"),
            ),
        )
    }

    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            ErrorResponse::authentication(message),
        )
    }

    /// 413: the body is over `--max-request-bytes`.
    pub fn too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            ErrorResponse::new(
                "invalid_request_error",
                format!("the request body is larger than the limit of {limit} bytes"),
                None,
                Some("request_too_large"),
            ),
        )
    }

    /// 408: the request body did not arrive in time (`--request-body-timeout`).
    pub fn body_timeout(limit: std::time::Duration) -> Self {
        Self::new(
            StatusCode::REQUEST_TIMEOUT,
            ErrorResponse::new(
                "invalid_request_error",
                format!(
                    "the request body did not arrive within {} s",
                    limit.as_secs_f64()
                ),
                None,
                Some("request_timeout"),
            ),
        )
    }

    /// 429: the engine's waiting queue is full.
    pub fn overloaded(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            ErrorResponse::overloaded(message),
        )
    }

    /// 429: a tenant is over one of its limits; `retry_after` seconds until it is not.
    pub fn rate_limited(message: impl Into<String>, retry_after: u64) -> Self {
        Self {
            retry_after: Some(retry_after),
            ..Self::new(
                StatusCode::TOO_MANY_REQUESTS,
                ErrorResponse::overloaded(message),
            )
        }
    }

    /// 403: a key that may not do this.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            ErrorResponse::new("permission_error", message, None, None),
        )
    }

    /// 503: the model is still loading, or the server is draining before exit.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ErrorResponse::new("service_unavailable", message, None, None),
        )
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            ErrorResponse::server_error(message),
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut res = (self.status, Json(self.body)).into_response();
        if let Some(secs) = self.retry_after {
            res.headers_mut()
                .insert(axum::http::header::RETRY_AFTER, secs.into());
        }
        res
    }
}
