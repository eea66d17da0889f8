//! `GET /metrics`: the Prometheus text exposition, every model's series under its own
//! `model_name` (vLLM's label), with each model's loads, unloads and memory.

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use pagoda_exposition::Exposition;

use crate::model::served::Served;
use crate::observe::metrics::compat::{self, MetricsCompat};
use crate::observe::metrics::labels::model_labels;
use crate::state::AppState;

pub async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    let mut e = match state.config().metrics_compat {
        MetricsCompat::Vllm => Exposition::with_aliases(compat::vllm_aliases),
        MetricsCompat::Pagoda => Exposition::new(),
    };
    let slots = state.models().slots();
    for slot in &slots {
        let name = &slot.spec.id;
        let served = slot.served();
        match served.as_deref() {
            Some(Served::Generate(l)) => {
                let stats = l.engine.stats();
                slot.metrics.render_model(&mut e, Some(&stats), name);
                crate::observe::metrics::engine::render_cache_config(
                    &mut e,
                    &l.kv,
                    l.prefix_caching,
                    name,
                );
                if let Some(p) = &l.kv_events {
                    e.counter(
                        "pagoda:kv_events_dropped_batches_total",
                        "KV event batches dropped on a full queue (each followed by a resync).",
                        model_labels(name),
                        p.overflows.load(std::sync::atomic::Ordering::Relaxed),
                    );
                }
                if let Some(c) = &l.kv_transfer {
                    crate::observe::metrics::kv_transfer::render(&mut e, name, l.kv_role.name(), c);
                }
                if let Some((ranks, c)) = &l.tensor_parallel {
                    crate::observe::metrics::tensor_parallel::render(&mut e, name, *ranks, c);
                }
                if let Some((stages, c)) = &l.pipeline_parallel {
                    crate::observe::metrics::pipeline_parallel::render(&mut e, name, *stages, c);
                }
                crate::observe::metrics::engine::render_loras(&mut e, &stats, &l.loras);
            }
            Some(Served::Embed(emb)) => {
                slot.metrics.render_model(&mut e, None, name);
                crate::observe::metrics::engine::render_embedder(&mut e, &emb.stats, name);
            }
            None => slot.metrics.render_model(&mut e, None, name),
        }
        crate::observe::metrics::models::render(&mut e, slot, state.config().quantization);
    }
    let default = slots
        .first()
        .map_or(&state.config().served_model_name, |s| &s.spec.id);
    state.metrics().render_refusals(&mut e, default);
    crate::observe::metrics::models::render_budget(&mut e, state.models());
    state.tenants().render_metrics(&mut e);
    (
        [(CONTENT_TYPE, pagoda_exposition::CONTENT_TYPE)],
        e.encode(),
    )
}
