//! `/health` (liveness: the process answers), `/ready` (200 once the model is loaded and
//! warmed, 503 before and while draining) and `/version`.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::error::ApiError;
use crate::state::AppState;

pub async fn health() -> StatusCode {
    StatusCode::OK
}

pub async fn ready(State(state): State<AppState>) -> Response {
    if state.is_ready() {
        Json(json!({"status": "ready"})).into_response()
    } else if state.is_draining() {
        ApiError::unavailable("the server is shutting down").into_response()
    } else {
        ApiError::unavailable("the model is still loading").into_response()
    }
}

pub async fn version() -> Json<serde_json::Value> {
    Json(json!({"version": env!("CARGO_PKG_VERSION")}))
}
