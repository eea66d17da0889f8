//! The models' lifecycle families: whether each is loaded, its bytes, its loads (with their
//! time), failed loads and unloads; and the memory budget they share.

use std::sync::atomic::Ordering;

use pagoda_exposition::Exposition;

use crate::model::registry::{ModelRegistry, Presence, Slot};
use crate::observe::metrics::labels::model_labels;

/// One model's lifecycle series.
pub fn render(e: &mut Exposition, slot: &Slot, quantization: pagoda_hf::Quantization) {
    let label = || model_labels(&slot.spec.id);
    let loaded = slot.presence() == Presence::Loaded;
    e.gauge(
        "pagoda:model_loaded",
        "1 while the model is loaded, 0 otherwise.",
        label(),
        u64::from(loaded),
    );
    e.gauge(
        "pagoda:model_memory_bytes",
        "Bytes the model takes loaded (weights + KV + scratch), counted against --models-memory; estimated while unloaded.",
        label(),
        slot.bytes(quantization),
    );
    let l = &slot.lifecycle;
    for (name, help, v) in [
        (
            "pagoda:model_loads_total",
            "Loads of the model that succeeded.",
            l.loads.load(Ordering::Relaxed),
        ),
        (
            "pagoda:model_load_failures_total",
            "Loads of the model that failed.",
            l.failures.load(Ordering::Relaxed),
        ),
        (
            "pagoda:model_unloads_total",
            "Unloads of the model (keep-alive ran out, memory needed, or asked for).",
            l.unloads.load(Ordering::Relaxed),
        ),
    ] {
        e.counter(name, help, label(), v);
    }
    let seconds = l.load_seconds.lock().map_or(0.0, |s| *s);
    e.counter(
        "pagoda:model_load_seconds_total",
        "Seconds spent loading the model, over all its loads.",
        label(),
        seconds,
    );
}

/// The budget all models share.
pub fn render_budget(e: &mut Exposition, models: &ModelRegistry) {
    e.gauge(
        "pagoda:models_memory_budget_bytes",
        "Bytes all loaded models may take (--models-memory).",
        Vec::new(),
        models.budget(),
    );
}
