//! Request preparation (validation, chat templates, tokenization) is CPU work: it runs on
//! tokio's blocking pool so that it never stalls the runtime that streams other requests.

use crate::error::ApiError;

/// Runs tokenization / template work off the async runtime.
pub async fn run_blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let span = tracing::Span::current();
    tokio::task::spawn_blocking(move || span.in_scope(f))
        .await
        .map_err(|e| ApiError::internal(format!("request preparation failed: {e}")))?
}
