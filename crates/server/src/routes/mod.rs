//! The HTTP routes, one file per endpoint group, and helpers they share.

pub mod chat;
pub mod completions;
pub mod health;
pub mod metrics;
pub mod models;
pub mod tokenize;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use crate::state::AppState;

/// Unix seconds now (`created`).
pub fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A response id: prefix, then 24 hex digits unique within the process and unlikely to repeat
/// across restarts (the clock seeds it).
pub fn random_id(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    format!("{prefix}-{t:016x}{n:08x}")
}

/// Runs tokenization / template work off the async runtime.
pub async fn run_blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::internal(format!("request preparation failed: {e}")))?
}

/// Renders an error response and counts it as a rejected request.
pub fn rejected(state: &AppState, e: ApiError) -> Response {
    let reason = match e.status {
        StatusCode::TOO_MANY_REQUESTS => None, // counted where the queue refused it
        StatusCode::SERVICE_UNAVAILABLE => Some("unavailable"),
        s if s.is_client_error() => Some("invalid"),
        _ => None,
    };
    if let Some(r) = reason {
        state.metrics().count_rejected(r);
    }
    e.into_response()
}
