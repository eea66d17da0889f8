//! pagoda-server: the OpenAI-compatible HTTP server. `app` builds the axum router over an
//! `AppState`; `serve` runs it on a listener until a shutdown signal, then drains: `/ready`
//! and new requests answer 503 while in-flight requests finish (up to the configured timeout).
//!
//! Tests and tools start it in-process: bind `127.0.0.1:0`, [`load`] the model, spawn
//! [`serve`] on the listener; no sleeps, the port is known before the server starts.

// Folders along a request's path: `http` (bytes -> API request), `api` (each dialect),
// `prepare` (-> `ValidRequest`), `generate` (-> engine -> response); `model`, `tenants`,
// `observe` and `error` serve every stage.
pub mod api;
pub mod config;
pub mod error;
pub mod generate;
pub mod http;
pub mod model;
pub mod observe;
pub mod prepare;
pub mod state;
pub mod tenants;

use std::future::Future;
use std::path::Path;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::extract::Request;
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use pagoda_model::EngineSetup;

pub use config::ServerConfig;
pub use error::ApiError;
pub use generate::generation::Generation;
pub use model::loader::{
    LoadError, LoadOptions, LoadedModel, OpenedModel, load_engine, open_model,
};
pub use model::loras::{LoraConfig, read_adapter};
pub use observe::metrics::compat::MetricsCompat;
pub use prepare::field_policy::UnknownFields;
pub use prepare::valid_request::{TextOptions, Unchecked, ValidRequest};
pub use prepare::validation_error::FieldNames;
pub use state::AppState;

/// The router: generation and tokenizer routes behind the API key (when set), health and
/// metrics open; OpenAI-shaped 404 for an unknown path and 405 for a known path's wrong
/// method. On the keyed routes the key is checked first: without it, a wrong method is a 401.
pub fn app(state: AppState) -> Router {
    let limit = state.config().max_request_bytes;
    let api = Router::new()
        .route(
            "/v1/completions",
            post(generate::endpoint::generate::<api::openai::completions::Completions>),
        )
        .route(
            "/v1/chat/completions",
            post(generate::endpoint::generate::<api::openai::chat::Chat>),
        )
        .route(
            "/v1/messages",
            post(generate::endpoint::generate::<api::anthropic::endpoint::Messages>),
        )
        .route(
            "/v1/messages/count_tokens",
            post(api::anthropic::endpoint::count_tokens),
        )
        .route(
            "/v1/responses",
            post(generate::endpoint::generate::<api::responses::endpoint::Responses>),
        )
        .route(
            "/v1/responses/{id}",
            get(api::responses::endpoint::get).delete(api::responses::endpoint::delete),
        )
        .route("/v1/models", get(api::openai::models::models))
        .route("/v1/embeddings", post(api::openai::embeddings::embeddings))
        .route("/embed", post(api::tei::embed::embed))
        .route("/v1/rerank", post(api::vllm::rerank::rerank))
        .route("/v2/rerank", post(api::vllm::rerank::rerank))
        .route("/rerank", post(api::tei::rerank::rerank))
        .route("/v1/score", post(api::vllm::score::score))
        .route("/score", post(api::vllm::score::score))
        .route("/tokenize", post(api::vllm::tokenize::tokenize))
        .route("/detokenize", post(api::vllm::tokenize::detokenize));
    let lifecycle = Router::new()
        .route("/models/load", post(api::lifecycle::models::load))
        .route("/models/unload", post(api::lifecycle::models::unload));
    let lifecycle = if state.config().lora.runtime_updates {
        lifecycle
            .route("/v1/load_lora_adapter", post(api::vllm::lora::load))
            .route("/v1/unload_lora_adapter", post(api::vllm::lora::unload))
    } else {
        lifecycle
    };
    let lifecycle = lifecycle.route_layer(middleware::from_fn_with_state(
        state.clone(),
        http::auth::require_admin,
    ));
    let api = api
        .merge(lifecycle)
        // Before the route layer, so that the key check wraps the 405 as well.
        .method_not_allowed_fallback(wrong_method)
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            http::auth::require_key,
        ));
    let cors = http::cors::layer(&state.config().allowed_origins);
    let router = Router::new()
        .merge(api)
        .route("/health", get(observe::health::health))
        .route("/ready", get(observe::health::ready))
        .route("/version", get(observe::health::version))
        .route(
            "/metrics",
            get(observe::metrics::endpoint::metrics).route_layer(middleware::from_fn_with_state(
                state.clone(),
                http::auth::require_metrics_key,
            )),
        )
        .method_not_allowed_fallback(wrong_method)
        .fallback(no_route)
        .layer(DefaultBodyLimit::max(limit))
        .with_state(state);
    // Outermost: every response, preflight and errors included, carries the request id.
    let router = match cors {
        Some(c) => router.layer(c),
        None => router,
    };
    router.layer(middleware::from_fn(http::request_id::request_id))
}

async fn no_route(req: Request) -> Response {
    ApiError::no_route(req.uri().path()).into_response()
}

/// axum adds the `Allow` header to what this returns.
async fn wrong_method(req: Request) -> Response {
    ApiError::method_not_allowed(req.method(), req.uri().path()).into_response()
}

/// Loads the model (blocking: call from a plain thread or `spawn_blocking`) into a new state.
pub fn load(
    model: &Path,
    setup: &EngineSetup,
    config: ServerConfig,
) -> Result<AppState, model::registry::ModelError> {
    let state = AppState::new(config);
    state.load_model(model, setup)?;
    Ok(state)
}

/// Re-reads `--api-keys-file` and `--models-dir` on every SIGHUP. The handler is installed before this returns,
/// so a SIGHUP sent once `serve` runs never takes the default action (exit).
fn reload_on_sighup(state: AppState) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut hup = signal(SignalKind::hangup())?;
        tokio::spawn(async move {
            while hup.recv().await.is_some() {
                if state.config().api_keys_file.is_some() {
                    match state.reload_tenants() {
                        Ok(r) => {
                            tracing::info!(keys = r.keys, tenants = r.tenants, "API keys reloaded")
                        }
                        Err(e) => tracing::error!("API keys not reloaded, the old ones stay: {e}"),
                    }
                }
                match state.models().rescan_dir() {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(added = n, "--models-dir: new models served"),
                    Err(e) => tracing::error!("--models-dir not read again: {e}"),
                }
            }
        });
    }
    #[cfg(not(unix))]
    let _ = state;
    Ok(())
}

/// Serves `state` on `listener` until `shutdown` resolves, then drains: new requests get 503
/// while in-flight ones finish, for up to `config.shutdown_timeout`; requests still running
/// then are cut off (their streams end with an error event) and the function returns.
/// Connections slow to send their request headers, or idle between requests, are closed after
/// `config.request_header_timeout` and `config.keep_alive_timeout`.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let router = app(state.clone());
    if state.config().api_keys_file.is_some() || state.config().models.dir.is_some() {
        reload_on_sighup(state.clone())?;
    }
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let drain_state = state.clone();
    tokio::spawn(async move {
        shutdown.await;
        drain_state.begin_drain();
        let timeout = drain_state.config().shutdown_timeout;
        if !drain_state.wait_idle(timeout).await {
            tracing::warn!(
                in_flight = drain_state.in_flight(),
                "shutdown timeout reached; cutting off requests still running"
            );
            let s = drain_state.clone();
            let _ = tokio::task::spawn_blocking(move || s.shutdown_engine()).await;
        }
        let _ = stop_tx.send(());
    });
    let timeouts = http::listener::Timeouts {
        header: state.config().request_header_timeout,
        keep_alive: state.config().keep_alive_timeout,
    };
    http::listener::run(listener, router, timeouts, async move {
        let _ = stop_rx.await;
    })
    .await;
    Ok(())
}
