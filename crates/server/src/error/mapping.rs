//! The one mapping from each layer's refusal to HTTP: a `ValidationError` (the request as sent)
//! and the engine's `AddRequestError` (at submission) become an `ApiError`'s status and OpenAI
//! body here, and nowhere else; `shape` then renders it in the called API's error shape.

use axum::http::StatusCode;
use pagoda_core::AddRequestError;
use pagoda_frontend::chat_prompt::PromptError;
use pagoda_protocol::ErrorResponse;

use crate::error::ApiError;
use crate::model::registry::ModelError;
use crate::prepare::validation_error::{FieldNames, ValidationError};

/// A request's model that cannot serve it: 404 for a name nobody serves, 503 while it cannot
/// load yet (no model, memory held by busy models), 500 for a load that failed.
impl From<ModelError> for ApiError {
    fn from(e: ModelError) -> Self {
        let message = e.to_string();
        match e {
            ModelError::NotFound { .. } => ApiError::new(
                StatusCode::NOT_FOUND,
                ErrorResponse::new(
                    "invalid_request_error",
                    message,
                    Some("model"),
                    Some("model_not_found"),
                ),
            ),
            ModelError::NoModels => ApiError::unavailable("the model is still loading"),
            ModelError::Busy { .. } => ApiError::unavailable(message),
            ModelError::LoadFailed { .. } | ModelError::TooBig { .. } => {
                ApiError::internal(message)
            }
        }
    }
}

impl ValidationError {
    /// The status and the OpenAI error body: the one place a refusal becomes HTTP.
    pub fn to_api_error(&self) -> ApiError {
        let message = self.to_string();
        let field = self.field();
        let body = match self {
            Self::UnknownField { field, near } => {
                ErrorResponse::unknown_parameter_near(field, near.as_deref())
            }
            Self::Unsupported { field, why } => ErrorResponse::unsupported_parameter(field, why),
            Self::ModelNotFound { model } => {
                return ApiError::new(StatusCode::NOT_FOUND, ErrorResponse::model_not_found(model));
            }
            Self::NotFound { field, message } => {
                return ApiError::new(
                    StatusCode::NOT_FOUND,
                    ErrorResponse::new(
                        "invalid_request_error",
                        message,
                        Some(field),
                        Some("not_found"),
                    ),
                );
            }
            _ => ErrorResponse::invalid_request(message, field.as_deref()),
        };
        ApiError::new(StatusCode::BAD_REQUEST, body)
    }
}

impl ValidationError {
    /// [`ValidationError::to_api_error`] with text-embeddings-inference's status (`/embed`):
    /// 400 for an empty input, 422 for a body that is not the JSON it takes, 413 for every
    /// other refusal (TEI's "validation" errors).
    pub fn to_tei_error(&self) -> ApiError {
        let mut e = self.to_api_error();
        e.status = match self {
            Self::Empty { .. } => StatusCode::BAD_REQUEST,
            Self::Body { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            Self::ModelNotFound { .. } | Self::NotFound { .. } => e.status,
            _ => StatusCode::PAYLOAD_TOO_LARGE,
        };
        e
    }
}

/// A body rejection (`http/body.rs`, in OpenAI's terms) with TEI's status: 422 for JSON it
/// cannot read, as TEI's extractor answers.
pub fn tei_body_error(mut e: ApiError) -> ApiError {
    if e.status == StatusCode::BAD_REQUEST {
        e.status = StatusCode::UNPROCESSABLE_ENTITY;
    }
    e
}

impl From<ValidationError> for ApiError {
    fn from(e: ValidationError) -> Self {
        if let ValidationError::Constraint { .. } = &e {
            tracing::info!("constraint refused: {e}");
        }
        e.to_api_error()
    }
}

/// The engine's refusal at submission: 429 when the queue is full now (with its real length)
/// or the SLO policy predicts a first token past its target (with a Retry-After), 400 when the
/// request could never fit, or is invalid.
pub fn admission_error(e: AddRequestError) -> ApiError {
    match e {
        AddRequestError::QueueFull {
            waiting,
            requested,
            limit,
        } => ApiError::overloaded(format!(
            "the server is at capacity: {waiting} sequences are waiting (at most {limit}) and this request needs {requested}; retry later"
        )),
        AddRequestError::NeverAdmissible { requested, limit } => ApiError::new(
            StatusCode::BAD_REQUEST,
            ErrorResponse::invalid_request(
                format!(
                    "this request needs {requested} sequences (prompts x `n`), more than the {limit} the server lets wait at once; send fewer prompts or a smaller `n`"
                ),
                Some("n"),
            ),
        ),
        AddRequestError::Invalid(error) => ValidationError::Engine {
            error,
            names: FieldNames::COMPLETIONS,
            prompt: 0,
        }
        .into(),
        AddRequestError::SloWouldBreak {
            retry_after_secs, ..
        } => ApiError::rate_limited(e.to_string(), retry_after_secs),
        AddRequestError::DuplicateId(_) => ApiError::internal(e.to_string()),
    }
}

/// A chat prompt refused by the template rule, through its `ValidationError`.
impl From<PromptError> for ApiError {
    fn from(e: PromptError) -> Self {
        ValidationError::from(e).into()
    }
}
