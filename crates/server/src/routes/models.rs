//! `GET /v1/models`: the one served model.

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use pagoda_protocol::{ModelCard, ModelList};

use crate::state::AppState;

pub async fn models(State(state): State<AppState>) -> Response {
    let mut card = ModelCard::new(&state.config().served_model_name, state.created(), "pagoda");
    if let Ok(l) = state.loaded() {
        card.root = Some(l.model_path.clone());
        card.max_model_len = Some(l.engine.max_model_len() as u32);
        card.task = Some("generate".to_owned());
    } else if let Ok(e) = state.embedder() {
        card.root = Some(e.model_path.clone());
        card.max_model_len = Some(e.max_seq_len as u32);
        card.task = Some("embed".to_owned());
    }
    Json(ModelList::new(vec![card])).into_response()
}
