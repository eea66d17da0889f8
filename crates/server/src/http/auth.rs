//! API-key checks: the bearer token names its tenant (`--api-key`, `--api-keys-file`; see
//! `tenants`), compared in constant time, and the tenant rides along as a request extension;
//! `/metrics` may need its own key. A tenant's prefix-cache salt is derived from its key (or
//! name) so one tenant can never name (and so probe) another tenant's cached blocks.

use axum::extract::{Request, State};
use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::Response;

use crate::error::ApiError;
use crate::error::shape::ErrorShape;
use crate::state::AppState;
use crate::tenants::key_digest::{constant_time_eq, key_digest};
use crate::tenants::{Scopes, TenantState};
use pagoda_api_keys::ROUTER_KEY_HEADER;

/// The tenant a request was authenticated as (absent when no keys are configured).
#[derive(Clone)]
pub struct Caller(pub std::sync::Arc<TenantState>);

/// What the request's key may do (absent when no keys are configured: anything).
#[derive(Clone, Copy)]
pub struct CallerScopes(pub Scopes);

/// Set when the request came through a router that proved itself with a `router`-scoped key
/// in [`ROUTER_KEY_HEADER`]: only then are `kv_transfer_params` taken (with keys configured).
#[derive(Clone, Copy)]
pub struct FromRouter;

/// Whether `req` may carry `kv_transfer_params`: no keys configured (the network and
/// `--kv-transfer-peers` are the boundary then), or a router vouched for it.
pub fn may_steer_transfers(state: &AppState, from_router: bool) -> bool {
    !state.tenants().required() || from_router
}

/// The routes that load and unload models and adapters: `admin` scope ([`require_admin`]),
/// not `inference`.
fn is_lifecycle(path: &str) -> bool {
    matches!(
        path,
        "/models/load" | "/models/unload" | "/v1/load_lora_adapter" | "/v1/unload_lora_adapter"
    )
}

/// The key a request presents: `Authorization: Bearer <key>`, or Anthropic's `x-api-key`.
fn presented_key(headers: &HeaderMap) -> Option<&str> {
    let bearer = headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let x_api_key = || headers.get("x-api-key").and_then(|v| v.to_str().ok());
    bearer.or_else(x_api_key).map(str::trim)
}

/// The 401, in the error body of the API called.
fn refused(state: &AppState, given: Option<&str>, path: &str) -> Response {
    state.metrics().count_rejected("unauthorized");
    let msg = if given.is_none() {
        "missing API key: send `Authorization: Bearer <key>` or `x-api-key: <key>`"
    } else {
        "incorrect API key"
    };
    ErrorShape::for_path(path).response(ApiError::unauthorized(msg))
}

/// Middleware: with keys configured, requires a known key and files the request under its
/// tenant (the `Caller` extension).
pub async fn require_key(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    let tenants = state.tenants();
    if tenants.required() {
        let given = presented_key(req.headers());
        match given.and_then(|k| tenants.resolve_with_scopes(k)) {
            Some((tenant, scopes)) => {
                if !scopes.inference && !is_lifecycle(req.uri().path()) {
                    state.metrics().count_rejected("unauthorized");
                    let e = ApiError::forbidden("this key lacks the `inference` scope");
                    return ErrorShape::for_path(req.uri().path()).response(e);
                }
                tracing::Span::current().record("tenant", tenant.name.as_str());
                req.extensions_mut().insert(Caller(tenant));
                req.extensions_mut().insert(CallerScopes(scopes));
                let router = req
                    .headers()
                    .get(ROUTER_KEY_HEADER)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|k| tenants.resolve_with_scopes(k.trim()));
                if router.is_some_and(|(_, s)| s.router) {
                    req.extensions_mut().insert(FromRouter);
                }
            }
            // The admin key (`--admin-api-key`) is a key of the server too, under no tenant.
            None if given.is_some_and(|g| is_admin(&state, g)) => {}
            None => return refused(&state, given, req.uri().path()),
        }
    }
    next.run(req).await
}

/// Middleware of the lifecycle routes (models and LoRA adapters, load and unload), after
/// [`require_key`]: with API keys set they need the admin key (`--admin-api-key`) or a key
/// with the `admin` scope (the one `--api-key` has every scope); without keys they are open,
/// as the rest.
pub async fn require_admin(State(state): State<AppState>, req: Request, next: Next) -> Response {
    if state.tenants().required() {
        let given = presented_key(req.headers());
        let scoped = req
            .extensions()
            .get::<CallerScopes>()
            .is_some_and(|CallerScopes(s)| s.admin);
        let ok = scoped || given.is_some_and(|g| is_admin(&state, g));
        if !ok {
            state.metrics().count_rejected("unauthorized");
            let e = ApiError::forbidden(
                "loading and unloading models and adapters needs the `admin` scope or --admin-api-key",
            );
            return ErrorShape::for_path(req.uri().path()).response(e);
        }
    }
    next.run(req).await
}

fn is_admin(state: &AppState, given: &str) -> bool {
    state
        .admin_key_digest()
        .is_some_and(|expected| constant_time_eq(&key_digest(given), expected))
}

/// Middleware of `/metrics`: with `--metrics-api-key`, requires that key, the admin key
/// (`--admin-api-key`) or a key with the `admin` scope (an operator's key reads what the
/// scraper reads; an `inference` key does not: metrics name tenants and adapters).
pub async fn require_metrics_key(
    State(state): State<AppState>,
    req: Request,
    next: Next,
) -> Response {
    if let Some(expected) = state.metrics_key_digest() {
        let given = presented_key(req.headers());
        let scoped_admin = |g: &str| {
            state
                .tenants()
                .resolve_with_scopes(g)
                .is_some_and(|(_, scopes)| scopes.admin)
        };
        let ok = given.is_some_and(|g| {
            constant_time_eq(&key_digest(g), expected) || is_admin(&state, g) || scoped_admin(g)
        });
        if !ok {
            return refused(&state, given, req.uri().path());
        }
    }
    next.run(req).await
}
