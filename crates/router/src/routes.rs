//! The router's HTTP front: the two generation routes (forwarded with a routing key), the
//! model list (forwarded), and its own /health, /ready and /metrics.

use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use pagoda_protocol::ErrorResponse;
use serde_json::Value;

use crate::error::RouteError;
use crate::proxy::forward;
use crate::routing_key::RoutingKey;
use crate::state::RouterState;
use crate::worker::Health;

type AppState = Arc<RouterState>;

/// The axum app over `state`.
pub fn app(state: AppState, max_request_bytes: usize) -> Router {
    Router::new()
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat))
        .route("/v1/models", get(models))
        .route("/health", get(health))
        .route("/ready", get(ready))
        .route("/metrics", get(metrics))
        .fallback(no_route)
        .layer(DefaultBodyLimit::max(max_request_bytes))
        .with_state(state)
}

#[derive(Clone, Copy)]
enum Api {
    Completions,
    Chat,
}

async fn completions(State(s): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    generate(s, Api::Completions, headers, body).await
}

async fn chat(State(s): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    generate(s, Api::Chat, headers, body).await
}

async fn generate(s: AppState, api: Api, headers: HeaderMap, body: Bytes) -> Response {
    let key = match &s.tokenizer {
        Some(tok) => {
            let (tok, bytes, root) = (Arc::clone(tok), body.clone(), s.root);
            let pool = Arc::clone(&s.pool);
            let tenant_salt = s
                .tenant_salts
                .as_ref()
                .and_then(|t| t.for_request(&headers));
            // Templates and BPE over a long prompt take milliseconds: off the runtime.
            tokio::task::spawn_blocking(move || {
                let Ok(v) = serde_json::from_slice::<Value>(&bytes) else {
                    return RoutingKey::none();
                };
                let tokens = match api {
                    Api::Completions => tok.completion_tokens(&v),
                    Api::Chat => tok.chat_tokens(&v),
                };
                let salt = v
                    .get("cache_salt")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                // A request naming an adapter hashes with its digest, as the engine does.
                let lora = v
                    .get("model")
                    .and_then(Value::as_str)
                    .and_then(|m| pool.adapter_digest(m));
                match tokens {
                    Some(t) => RoutingKey::new(t, root, lora, tenant_salt.as_deref(), salt),
                    None => RoutingKey::none(),
                }
            })
            .await
            .unwrap_or_default()
        }
        None => RoutingKey::none(),
    };
    let path = match api {
        Api::Completions => "/v1/completions",
        Api::Chat => "/v1/chat/completions",
    };
    if s.prefill.workers().is_empty() {
        forward(&s, Method::POST, path, &headers, body, &key).await
    } else {
        crate::pd::route(&s, path, &headers, body, &key).await
    }
}

async fn models(State(s): State<AppState>, headers: HeaderMap) -> Response {
    forward(
        &s,
        Method::GET,
        "/v1/models",
        &headers,
        Bytes::new(),
        &RoutingKey::none(),
    )
    .await
}

async fn health() -> StatusCode {
    StatusCode::OK
}

/// Ready while at least one replica is.
async fn ready(State(s): State<AppState>) -> Response {
    if s.pool.workers().iter().any(|w| w.health() == Health::Ready) {
        StatusCode::OK.into_response()
    } else {
        RouteError::NoReplica.into_response()
    }
}

async fn metrics(State(s): State<AppState>) -> Response {
    let mut e = pagoda_exposition::Exposition::new();
    s.metrics.render(&mut e, &s.pool, s.policy_kind.name());
    if !s.prefill.workers().is_empty() {
        s.pd_metrics.render(&mut e, &s.prefill);
    }
    (
        [("content-type", pagoda_exposition::CONTENT_TYPE)],
        e.encode(),
    )
        .into_response()
}

async fn no_route() -> Response {
    (
        StatusCode::NOT_FOUND,
        axum::Json(ErrorResponse::not_found("no such route on the router")),
    )
        .into_response()
}
