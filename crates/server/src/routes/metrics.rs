//! `GET /metrics`: the Prometheus text exposition.

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;

use crate::state::AppState;

pub async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    let stats = state.loaded().ok().map(|l| l.engine.stats());
    let mut text = state
        .metrics()
        .render(stats.as_ref(), &state.config().served_model_name);
    state.tenants().render_metrics(&mut text);
    if let (Ok(l), Some(s)) = (state.loaded(), stats.as_ref()) {
        crate::metrics::render_loras(&mut text, s, &l.loras);
    }
    if let Ok(e) = state.embedder() {
        text.push_str(&crate::metrics::render_embedder(
            &e.stats,
            &state.config().served_model_name,
        ));
    }
    (
        [(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        text,
    )
}
