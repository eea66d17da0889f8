//! `GET /v1/models`: the served model, then its LoRA adapters (`parent` = the model), as vLLM
//! lists them.

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use pagoda_protocol::{ModelCard, ModelList};

use crate::state::AppState;

pub async fn models(State(state): State<AppState>) -> Response {
    let base = &state.config().served_model_name;
    let mut card = ModelCard::new(base, state.created(), "pagoda");
    let mut adapters = Vec::new();
    if let Ok(l) = state.loaded() {
        for (name, path, _, _) in l.loras.list() {
            let mut a = ModelCard::new(&name, state.created(), "pagoda");
            a.root = Some(path);
            a.parent = Some(base.clone());
            a.max_model_len = Some(l.engine.max_model_len() as u32);
            a.task = Some("generate".to_owned());
            adapters.push(a);
        }
        card.root = Some(l.model_path.clone());
        card.max_model_len = Some(l.engine.max_model_len() as u32);
        card.task = Some("generate".to_owned());
    } else if let Ok(e) = state.encoder_for("GET /v1/models") {
        card.root = Some(e.model_path.clone());
        card.max_model_len = Some(e.max_seq_len as u32);
        // vLLM's names: a cross-encoder serves `score` (rerank and score), others `embed`.
        card.task = Some(if e.cross_encoder { "score" } else { "embed" }.to_owned());
    }
    let mut cards = vec![card];
    cards.extend(adapters);
    Json(ModelList::new(cards)).into_response()
}
