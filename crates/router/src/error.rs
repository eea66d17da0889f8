//! The router's errors: configuration mistakes (reported at start-up) and request failures,
//! which reach the client in OpenAI's error shape with the status that fits.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use pagoda_protocol::ErrorResponse;

/// A flag or model that cannot work.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("`{spec}` is not a worker: {why}")]
    Worker { spec: String, why: String },
    #[error("unknown policy `{0}` (expected round_robin, least_load or cache_aware)")]
    Policy(String),
    #[error("no replicas: give --worker URL (one or more) or --worker-dns NAME:PORT")]
    NoWorkers,
    #[error("--policy cache_aware needs --model (the GGUF whose tokenizer the replicas use)")]
    CacheAwareNeedsModel,
    #[error("--prefill with --pd-threshold above 0 needs --model (to count a prompt's tokens)")]
    PdNeedsModel,
    #[error("cannot read the model's tokenizer: {0}")]
    Tokenizer(String),
}

/// Why a request could not be served.
#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    #[error("no replica is ready")]
    NoReplica,
    #[error("every replica failed: {0}")]
    AllFailed(String),
    #[error("the request body could not be read: {0}")]
    Body(String),
}

impl IntoResponse for RouteError {
    fn into_response(self) -> Response {
        let (status, body) = match &self {
            Self::NoReplica => (
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorResponse::new("service_unavailable", self.to_string(), None, None),
            ),
            Self::AllFailed(_) => (
                StatusCode::BAD_GATEWAY,
                ErrorResponse::server_error(self.to_string()),
            ),
            Self::Body(_) => (
                StatusCode::BAD_REQUEST,
                ErrorResponse::invalid_request(self.to_string(), None),
            ),
        };
        (status, axum::Json(body)).into_response()
    }
}
