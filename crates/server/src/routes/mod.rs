//! The HTTP routes, one file per endpoint group, and helpers they share.

pub mod chat;
pub mod completions;
pub mod embeddings;
pub mod health;
pub mod metrics;
pub mod models;
pub mod tokenize;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::body::{JsonBody, WireRequest};
use crate::error::ApiError;
use crate::generation::Generation;
use crate::state::{AppState, Loaded};
use crate::stream::{self as sse, ChoiceFormatter};
use crate::valid_request::ValidRequest;
use crate::validation_error::ValidationError;

/// A generation endpoint (chat, completions, ...): its wire request becomes a `ValidRequest`
/// plus what its formatter needs; [`generate`] does the rest the same way for all of them.
pub trait GenerationEndpoint: Sized + Send + 'static {
    type Wire: WireRequest + Send + 'static;
    type Formatter: ChoiceFormatter;

    /// Validation, chat template and tokenization (blocking: run off the async runtime): the
    /// request to submit, and what the formatter will need.
    fn prepare(
        state: &AppState,
        loaded: &Loaded,
        wire: Self::Wire,
    ) -> Result<(ValidRequest, Self), ValidationError>;

    fn formatter(self, state: &AppState, req: &ValidRequest, choices: usize) -> Self::Formatter;
}

/// The handler of every generation endpoint: admit (503 while loading or draining), prepare,
/// submit (429/400 before any byte is sent), then stream SSE or answer one JSON body.
pub async fn generate<E: GenerationEndpoint>(
    State(state): State<AppState>,
    JsonBody(req): JsonBody<E::Wire>,
) -> Response {
    match run::<E>(state.clone(), req).await {
        Ok(r) => r,
        Err(e) => rejected(&state, e),
    }
}

async fn run<E: GenerationEndpoint>(state: AppState, req: E::Wire) -> Result<Response, ApiError> {
    let guard = state.admit()?;
    let st = state.clone();
    let (request, prepared) = run_blocking(move || Ok(E::prepare(&st, st.loaded()?, req)?)).await?;
    let loaded = state.loaded()?;
    let generation = Generation::start(
        &loaded.engine,
        &loaded.tokenizer,
        &request,
        Some(state.shared_metrics()),
    )?;
    let fmt = prepared.formatter(&state, &request, generation.num_choices());
    let (stream, include_usage) = (request.stream, request.include_usage);
    if stream {
        Ok(sse::sse_response(sse::events(
            generation,
            fmt,
            include_usage,
            guard,
        )))
    } else {
        let response = sse::collect(generation, fmt).await?;
        drop(guard);
        Ok(Json(response).into_response())
    }
}

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
