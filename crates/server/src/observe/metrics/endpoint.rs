//! `GET /metrics`: the Prometheus text exposition.

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use pagoda_exposition::Exposition;

use crate::observe::metrics::compat::{self, MetricsCompat};
use crate::state::AppState;

pub async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    let loaded = state.loaded().ok();
    let stats = loaded.map(|l| l.engine.stats());
    let name = &state.config().served_model_name;
    let mut e = match state.config().metrics_compat {
        MetricsCompat::Vllm => Exposition::with_aliases(compat::vllm_aliases),
        MetricsCompat::Pagoda => Exposition::new(),
    };
    state.metrics().render(&mut e, stats.as_ref(), name);
    if let Some(l) = loaded {
        crate::observe::metrics::engine::render_cache_config(&mut e, &l.kv, l.prefix_caching, name);
    }
    state.tenants().render_metrics(&mut e);
    if let Some(p) = state.loaded().ok().and_then(|l| l.kv_events.as_ref()) {
        e.counter(
            "pagoda:kv_events_dropped_batches_total",
            "KV event batches dropped on a full queue (each followed by a resync).",
            crate::observe::metrics::labels::model_labels(name),
            p.overflows.load(std::sync::atomic::Ordering::Relaxed),
        );
    }
    if let Some(l) = loaded
        && let Some(c) = &l.kv_transfer
    {
        crate::observe::metrics::kv_transfer::render(&mut e, name, l.kv_role.name(), c);
    }
    if let (Ok(l), Some(s)) = (state.loaded(), stats.as_ref()) {
        crate::observe::metrics::engine::render_loras(&mut e, s, &l.loras);
    }
    if let Ok(emb) = state.embedder() {
        crate::observe::metrics::engine::render_embedder(&mut e, &emb.stats, name);
    }
    (
        [(CONTENT_TYPE, pagoda_exposition::CONTENT_TYPE)],
        e.encode(),
    )
}
