//! `ModelLease`: a request's hold on its model. While any lease lives the model stays loaded;
//! dropping the last one starts the model's keep-alive clock (the request's `keep_alive`, if it
//! gave one, becomes the model's).

use std::sync::Arc;

use crate::model::embedder::Embedder;
use crate::model::keep_alive::KeepAlive;
use crate::model::served::{Loaded, Served, Task};
use crate::model::slot::{Signals, Slot};
use crate::prepare::validation_error::ValidationError;

pub struct ModelLease {
    signals: Arc<Signals>,
    slot: Arc<Slot>,
    served: Arc<Served>,
    adapter: Option<String>,
    keep_alive: Option<KeepAlive>,
}

impl ModelLease {
    pub(crate) fn new(
        signals: Arc<Signals>,
        slot: Arc<Slot>,
        served: Arc<Served>,
        adapter: Option<String>,
        keep_alive: Option<KeepAlive>,
    ) -> Self {
        Self {
            signals,
            slot,
            served,
            adapter,
            keep_alive,
        }
    }

    /// The model's id.
    pub fn id(&self) -> &str {
        &self.slot.spec.id
    }

    /// What responses say in `model`: the adapter's name when one was asked for, else the
    /// model's id.
    pub fn name(&self) -> &str {
        self.adapter.as_deref().unwrap_or(&self.slot.spec.id)
    }

    /// The LoRA adapter the request named, if any.
    pub fn adapter(&self) -> Option<&str> {
        self.adapter.as_deref()
    }

    pub fn slot(&self) -> &Arc<Slot> {
        &self.slot
    }

    pub fn served(&self) -> &Served {
        &self.served
    }

    /// The generation model, or 400 naming the model and what it serves instead.
    pub fn generator(&self) -> Result<&Loaded, ValidationError> {
        match &*self.served {
            Served::Generate(l) => Ok(l),
            other => Err(self.wrong_task(other.task(), "text generation")),
        }
    }

    /// The embedding model, or 400 naming the model and what it serves instead (a
    /// cross-encoder has no embeddings).
    pub fn embedder(&self) -> Result<&Embedder, ValidationError> {
        match &*self.served {
            Served::Embed(e) if !e.cross_encoder => Ok(e),
            other => Err(self.wrong_task(other.task(), "embeddings")),
        }
    }

    /// The encoder that scores text pairs (rerank, score): a cross-encoder, or an embedding
    /// model (the cosine of two embeddings); 400 for a generation model.
    pub fn encoder(&self) -> Result<&Embedder, ValidationError> {
        match &*self.served {
            Served::Embed(e) => Ok(e),
            other => Err(self.wrong_task(other.task(), "scores of text pairs")),
        }
    }

    fn wrong_task(&self, serves: Task, asked: &'static str) -> ValidationError {
        ValidationError::WrongTask {
            model: self.slot.spec.id.clone(),
            serves: serves.serves(),
            asked,
        }
    }

    /// Sets the keep-alive the model gets when this request ends.
    pub fn keep_alive(&mut self, k: Option<KeepAlive>) {
        if k.is_some() {
            self.keep_alive = k;
        }
    }
}

impl Drop for ModelLease {
    fn drop(&mut self) {
        self.signals.released(&self.slot, self.keep_alive);
    }
}
