//! A refused request as the response: rendered in the called API's error shape and counted in
//! `pagoda:request_rejected_total` by its kind (invalid, unavailable; 429s are counted where
//! the queue or the tenant refused them).

use axum::http::StatusCode;
use axum::response::Response;

use crate::error::ApiError;
use crate::error::shape::ErrorShape;
use crate::state::AppState;

/// Renders an error response and counts it as a rejected request.
pub fn rejected(state: &AppState, e: ApiError) -> Response {
    rejected_as(state, ErrorShape::OpenAi, e)
}

/// [`rejected`], in the error body of the API that was called.
pub fn rejected_as(state: &AppState, shape: ErrorShape, e: ApiError) -> Response {
    let reason = match e.status {
        StatusCode::TOO_MANY_REQUESTS => None, // counted where the queue refused it
        StatusCode::SERVICE_UNAVAILABLE => Some("unavailable"),
        s if s.is_client_error() => Some("invalid"),
        _ => None,
    };
    if let Some(r) = reason {
        state.metrics().count_rejected(r);
    }
    shape.response(e)
}
