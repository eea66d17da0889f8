//! `GET /metrics`: the Prometheus text exposition.

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;

use crate::metrics_compat::{self, MetricsCompat};
use crate::state::AppState;

pub async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    let loaded = state.loaded().ok();
    let stats = loaded.map(|l| l.engine.stats());
    let name = &state.config().served_model_name;
    let mut text = state.metrics().render(stats.as_ref(), name);
    if let Some(l) = loaded {
        crate::metrics::render_cache_config(&mut text, &l.kv, l.prefix_caching, name);
    }
    state.tenants().render_metrics(&mut text);
    if let Some(p) = state.loaded().ok().and_then(|l| l.kv_events.as_ref()) {
        crate::metrics::counter(
            &mut text,
            "pagoda:kv_events_dropped_batches_total",
            "KV event batches dropped on a full queue (each followed by a resync)",
            &crate::metrics::model_label(&state.config().served_model_name),
            p.overflows.load(std::sync::atomic::Ordering::Relaxed),
        );
    }
    if let Some(l) = loaded
        && let Some(c) = &l.kv_transfer
    {
        let label = crate::metrics::model_label(name);
        crate::kv_transfer_metrics::render(&mut text, &label, l.kv_role.name(), c);
    }
    if let (Ok(l), Some(s)) = (state.loaded(), stats.as_ref()) {
        crate::metrics::render_loras(&mut text, s, &l.loras);
    }
    if let Ok(e) = state.embedder() {
        text.push_str(&crate::metrics::render_embedder(&e.stats, name));
    }
    if state.config().metrics_compat == MetricsCompat::Vllm {
        let copies = metrics_compat::mirror_vllm(&text);
        text.push_str(&copies);
    }
    (
        [(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        text,
    )
}
