//! The one handler of every generation endpoint (chat, completions, messages, responses):
//! admit, prepare off the runtime, submit, then stream SSE or answer one JSON body. Each API
//! plugs in through [`GenerationEndpoint`].

use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};

use crate::error::ApiError;
use crate::error::rejected::rejected_as;
use crate::error::shape::ErrorShape;
use crate::generate::generation::Generation;
use crate::generate::stream::{self as sse, ChoiceFormatter};
use crate::http::auth::{Caller, FromRouter, may_steer_transfers};
use crate::http::body::{JsonBody, WireRequest};
use crate::http::request_id::RequestInfo;
use crate::model::lease::ModelLease;
use crate::observe::otlp::AttrValue;
use crate::observe::request_trace::RequestTrace;
use crate::prepare::blocking::run_blocking;
use crate::prepare::valid_request::ValidRequest;
use crate::prepare::validation_error::ValidationError;
use crate::state::{AppState, Loaded};
use crate::tenants::{OverLimit, TenantState};

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
        model: &ModelLease,
        wire: Self::Wire,
    ) -> Result<(ValidRequest, Self), ValidationError>;

    /// `model` is the generation model the request was prepared for.
    fn formatter(
        self,
        state: &AppState,
        model: &Model<'_>,
        req: &ValidRequest,
        choices: usize,
    ) -> Self::Formatter;
}

/// The generation model a formatter writes for, and the name its answers carry in `model`.
pub struct Model<'a> {
    pub loaded: &'a Loaded,
    pub name: &'a str,
}

/// The handler of every generation endpoint: admit (503 while loading or draining), prepare,
/// submit (429/400 before any byte is sent), then stream SSE or answer one JSON body.
pub async fn generate<E: GenerationEndpoint>(
    State(state): State<AppState>,
    caller: Option<Extension<Caller>>,
    from_router: Option<Extension<FromRouter>>,
    info: Option<Extension<RequestInfo>>,
    body: Result<JsonBody<E::Wire>, ApiError>,
) -> Response {
    let tenant = caller.map(|Extension(Caller(t))| t);
    let info = info.map(|Extension(i)| i);
    let from_router = from_router.is_some();
    let result = match body {
        Ok(JsonBody(req)) => run::<E>(state.clone(), tenant, from_router, info, req).await,
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
    from_router: bool,
    info: Option<RequestInfo>,
    req: E::Wire,
) -> Result<Response, ApiError> {
    let in_flight = state.admit()?;
    if let Some(t) = &tenant {
        // Before the work of preparing: a tenant at its request or concurrency limit.
        t.precheck().map_err(|e| over_limit(&state, t, e))?;
    }
    let lease = Arc::new(state.model_for(&req).await?);
    let (st, model) = (state.clone(), Arc::clone(&lease));
    let (mut request, prepared) = run_blocking(move || Ok(E::prepare(&st, &model, req)?)).await?;
    // A client must not steer a replica's KV transfers: with keys set, only a router may.
    if request.params().kv_transfer.is_some() && !may_steer_transfers(&state, from_router) {
        return Err(ApiError::forbidden(
            "kv_transfer_params are taken only from a router: its key, with the `router` scope, goes in the x-pagoda-router-key header",
        ));
    }
    let user_agent = info.as_ref().and_then(|i| i.user_agent.as_deref());
    request.ignored.report(state.metrics(), user_agent);
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
    let loaded = lease.generator()?;
    let generation = Generation::start(
        &loaded.engine,
        &loaded.tokenizer,
        &request,
        Some(Arc::clone(&lease.slot().metrics)),
        Some(state.metrics()),
    )?
    .traced(trace(&state, info, tenant.as_deref(), lease.name()))
    .count_for(tenant);
    let model = Model {
        loaded,
        name: lease.name(),
    };
    let fmt = prepared.formatter(&state, &model, &request, generation.num_choices());
    // Held until the answer ends: the model stays loaded while the request runs.
    let guard = (in_flight, permit, lease);
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
    model: &str,
) -> Option<RequestTrace> {
    let (exporter, info) = (state.otlp()?, info?);
    let mut attributes = vec![
        ("pagoda.request_id", AttrValue::Str(info.id)),
        ("gen_ai.request.model", AttrValue::Str(model.to_owned())),
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
        return ApiError::bad_request(
            format!(
                "this request's prompt is larger than tenant `{}`'s {} of {}",
                t.name, e.limit, e.value
            ),
            None,
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
