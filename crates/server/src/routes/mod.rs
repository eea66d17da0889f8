//! The HTTP routes, one file per endpoint group, and helpers they share.

pub mod chat;
pub mod completions;
pub mod embeddings;
pub mod health;
pub mod lora;
pub mod messages;
pub mod metrics;
pub mod models;
pub mod responses;
pub mod tokenize;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use pagoda_protocol::ErrorResponse;

use crate::auth::Caller;
use crate::body::{JsonBody, WireRequest};
use crate::error::ApiError;
use crate::error_shape::ErrorShape;
use crate::generation::Generation;
use crate::otlp::AttrValue;
use crate::request_id::RequestInfo;
use crate::request_trace::RequestTrace;
use crate::state::{AppState, Loaded};
use crate::stream::{self as sse, ChoiceFormatter};
use crate::tenants::{OverLimit, TenantState};
use crate::valid_request::ValidRequest;
use crate::validation_error::ValidationError;

/// A generation endpoint (chat, completions, ...): its wire request becomes a `ValidRequest`
/// plus what its formatter needs; [`generate`] does the rest the same way for all of them.
pub trait GenerationEndpoint: Sized + Send + 'static {
    type Wire: WireRequest + Send + 'static;
    type Formatter: ChoiceFormatter;
    /// The error body this API answers with.
    const ERRORS: ErrorShape = ErrorShape::OpenAi;

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
    caller: Option<Extension<Caller>>,
    info: Option<Extension<RequestInfo>>,
    body: Result<JsonBody<E::Wire>, ApiError>,
) -> Response {
    let tenant = caller.map(|Extension(Caller(t))| t);
    let info = info.map(|Extension(i)| i);
    let result = match body {
        Ok(JsonBody(req)) => run::<E>(state.clone(), tenant, info, req).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(r) => r,
        Err(e) => rejected_as(&state, E::ERRORS, e),
    }
}

async fn run<E: GenerationEndpoint>(
    state: AppState,
    tenant: Option<Arc<TenantState>>,
    info: Option<RequestInfo>,
    req: E::Wire,
) -> Result<Response, ApiError> {
    let in_flight = state.admit()?;
    if let Some(t) = &tenant {
        // Before the work of preparing: a tenant at its request or concurrency limit.
        t.precheck().map_err(|e| over_limit(&state, t, e))?;
    }
    let st = state.clone();
    let (mut request, prepared) =
        run_blocking(move || Ok(E::prepare(&st, st.loaded()?, req)?)).await?;
    let permit = match &tenant {
        Some(t) => {
            request.for_tenant(t.engine_tenant(), &t.salt);
            let permit = t
                .admit(request.prompt_tokens())
                .map_err(|e| over_limit(&state, t, e))?;
            Some(permit)
        }
        None => None,
    };
    let guard = (in_flight, permit);
    let loaded = state.loaded()?;
    let generation = Generation::start(
        &loaded.engine,
        &loaded.tokenizer,
        &request,
        Some(state.shared_metrics()),
    )?
    .traced(trace(&state, info, tenant.as_deref()))
    .count_for(tenant);
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

/// The request's trace, when traces are exported.
fn trace(
    state: &AppState,
    info: Option<RequestInfo>,
    tenant: Option<&TenantState>,
) -> Option<RequestTrace> {
    let (exporter, info) = (state.otlp()?, info?);
    let mut attributes = vec![
        ("pagoda.request_id", AttrValue::Str(info.id)),
        (
            "gen_ai.request.model",
            AttrValue::Str(state.config().served_model_name.clone()),
        ),
    ];
    if let Some(t) = tenant {
        attributes.push(("pagoda.tenant", AttrValue::Str(t.name.clone())));
    }
    RequestTrace::begin(
        Arc::clone(exporter),
        info.trace,
        info.route,
        info.received,
        attributes,
    )
}

/// 429 naming the limit (400 when the request could never pass it).
fn over_limit(state: &AppState, t: &TenantState, e: OverLimit) -> ApiError {
    if e.never {
        return ApiError::new(
            StatusCode::BAD_REQUEST,
            ErrorResponse::invalid_request(
                format!(
                    "this request's prompt is larger than tenant `{}`'s {} of {}",
                    t.name, e.limit, e.value
                ),
                None,
            ),
        );
    }
    state.metrics().count_rejected("rate_limited");
    ApiError::rate_limited(
        format!(
            "tenant `{}` is over its {} of {}; retry in {} s",
            t.name, e.limit, e.value, e.retry_after
        ),
        e.retry_after,
    )
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
    let span = tracing::Span::current();
    tokio::task::spawn_blocking(move || span.in_scope(f))
        .await
        .map_err(|e| ApiError::internal(format!("request preparation failed: {e}")))?
}

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
