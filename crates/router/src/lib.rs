//! `pagoda router`: an OpenAI-compatible front over several `pagoda serve` replicas. Requests
//! go to a replica chosen by a policy (`round_robin`, `least_load`, or `cache_aware`, which
//! tokenizes the prompt as the replicas do and scores them by the prefix blocks their KV events
//! say they hold, against their load); streams pass through chunk by chunk. It depends on the
//! wire types, the tokenizer and the block hash, never on the engine.
//!
//! Layout: `config` (flags' values), `pool` + `worker` + `index` (replicas, their health, load
//! and cached blocks), `health` (the poller), `policy/` (one file each), `routing_key` +
//! `prompt` (tokens and hashes), `proxy` (forwarding, retries, mid-stream failure), `pd`
//! (prefill/decode disaggregation: the prefill hop, then the decode replica), `routes`,
//! `metrics`.

pub mod config;
pub mod error;
mod health;
pub mod index;
pub mod metrics;
pub mod pd;
pub mod pd_metrics;
pub mod policy;
pub mod pool;
mod prom;
pub mod prompt;
pub mod proxy;
mod routes;
pub mod routing_key;
pub mod state;
pub mod tenant_salts;
pub mod worker;

use std::future::Future;
use std::sync::Arc;

pub use config::{CacheAwareTuning, DnsWorkers, PolicyKind, RouterConfig, WorkerSpec};
pub use error::{ConfigError, RouteError};
pub use prompt::PromptTokenizer;
pub use proxy::WORKER_HEADER;
pub use tenant_salts::TenantSalts;

use pool::Pool;
use state::RouterState;

/// A router ready to serve: its app and its shared state (for tests and metrics).
pub struct Router {
    pub app: axum::Router,
    pub state: Arc<RouterState>,
}

/// Builds the router: the pool (static replicas now, DNS ones as they resolve), one health
/// poll of every static replica, then the poller, DNS and event followers in the background
/// (call inside a tokio runtime).
pub async fn build(config: RouterConfig) -> Result<Router, ConfigError> {
    config.check()?;
    let pool = Arc::new(Pool::default());
    for w in &config.workers {
        pool.add(w.clone());
    }
    let state = RouterState::new(&config, Arc::clone(&pool))
        .map_err(|e| ConfigError::Tokenizer(format!("HTTP client: {e}")))?;
    let state = Arc::new(state);
    if let Some(dns) = config.dns.clone() {
        tokio::spawn(pool::follow_dns(Arc::downgrade(&pool), dns));
    }
    health::poll_all(&pool, &state.client, config.poll_interval).await;
    tokio::spawn(health::run(
        Arc::downgrade(&pool),
        state.client.clone(),
        config.poll_interval,
    ));
    if !config.prefill.is_empty() {
        health::poll_all(&state.prefill, &state.client, config.poll_interval).await;
        tokio::spawn(health::run(
            Arc::downgrade(&state.prefill),
            state.client.clone(),
            config.poll_interval,
        ));
    }
    let app = routes::app(Arc::clone(&state), config.max_request_bytes);
    Ok(Router { app, state })
}

/// Serves `router` on `listener` until `shutdown` resolves; a `--tenant-keys-file` is re-read
/// on SIGHUP meanwhile.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use axum::serve::ListenerExt;
    if let Some(salts) = router.state.tenant_salts.as_ref().filter(|s| s.has_file()) {
        tenant_salts::reload_on_sighup(Arc::clone(salts))?;
    }
    // Without TCP_NODELAY each streamed chunk can wait for the client's delayed ACK.
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, router.app)
        .with_graceful_shutdown(shutdown)
        .await
}
