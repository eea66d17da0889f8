//! `GET /v1/models`: every model the server serves, loaded or not (the default first), with its
//! task, state, size and context length (the file's while unloaded); then the default model's
//! LoRA adapters (`parent` = the model), as vLLM lists them. A model split over ranks has a
//! `parallel` object: the sizes, and per rank its CPUs, layers, heads and weight bytes.

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use pagoda_model::RankLayout;
use pagoda_protocol::{ModelCard, ModelList, ParallelLayout, RankCard};

use crate::model::registry::Slot;
use crate::model::served::{Served, Task};
use crate::state::AppState;

pub async fn models(State(state): State<AppState>) -> Response {
    let mut cards = Vec::new();
    let mut adapters = Vec::new();
    for slot in state.models().slots() {
        let card = card(&state, &slot);
        if let Some(Served::Generate(l)) = slot.served().as_deref() {
            for (name, path, _, _) in l.loras.list() {
                let mut a = ModelCard::new(&name, state.created(), "pagoda");
                a.root = Some(path);
                a.parent = Some(slot.spec.id.clone());
                a.max_model_len = card.max_model_len;
                a.task = Some(Task::Generate.name().to_owned());
                adapters.push(a);
            }
        }
        cards.push(card);
    }
    cards.extend(adapters);
    Json(ModelList::new(cards)).into_response()
}

/// One model's card; what only loading reveals (context length) is absent while unloaded.
fn card(state: &AppState, slot: &Slot) -> ModelCard {
    let mut card = ModelCard::new(&slot.spec.id, state.created(), "pagoda");
    card.root = Some(slot.spec.path.display().to_string());
    card.state = Some(slot.presence().name().to_owned());
    card.size_bytes = Some(slot.bytes(state.config().quantization));
    card.aliases = slot.spec.aliases.clone();
    card.keep_alive = Some(slot.keep_alive().seconds());
    let task = match slot.served().as_deref() {
        Some(s) => {
            card.max_model_len = Some(s.max_model_len() as u32);
            if let Served::Generate(l) = s {
                card.sampling_defaults = serde_json::to_value(&l.sampling_defaults).ok();
                card.parallel = parallel(&l.layout);
            }
            s.task()
        }
        None => {
            card.max_model_len = slot.declared_context().map(|n| n as u32);
            Task::of_path(&slot.spec.path)
        }
    };
    card.task = Some(task.name().to_owned());
    card
}

/// The `parallel` object of a model split over more than one rank.
fn parallel(l: &RankLayout) -> Option<ParallelLayout> {
    let range = |r: &std::ops::Range<usize>| [r.start, r.end];
    (l.ranks.len() > 1).then(|| ParallelLayout {
        tensor_parallel_size: l.tensor_parallel_size,
        pipeline_parallel_size: l.pipeline_parallel_size,
        backend: l.backend.to_owned(),
        ranks: l
            .ranks
            .iter()
            .map(|r| RankCard {
                rank: r.rank,
                cpus: r.cpus.clone(),
                layers: range(&r.layers),
                heads: range(&r.heads),
                kv_heads: range(&r.kv_heads),
                vocab: r.vocab.as_ref().map(range),
                weight_bytes: r.weight_bytes,
            })
            .collect(),
    })
}
