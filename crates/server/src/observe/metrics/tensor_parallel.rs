//! Tensor parallelism on `/metrics` (`--tensor-parallel-size` > 1): the ranks, and the time
//! and bytes of rank 0's all-reduces (two per layer per step) and logit gathers (one per
//! step). The time includes waiting for the slowest rank: what the split costs a step.

use std::sync::atomic::Ordering;

use pagoda_exposition::Exposition;
use pagoda_model::TpCounters;

use crate::observe::metrics::labels::model_labels;

pub(crate) fn render(e: &mut Exposition, model_name: &str, ranks: usize, c: &TpCounters) {
    let labels = || model_labels(model_name);
    e.gauge(
        "pagoda:tp_size",
        "Tensor-parallel ranks the model is split over.",
        labels(),
        ranks as u64,
    );
    e.counter(
        "pagoda:tp_all_reduce_seconds_total",
        "Seconds rank 0 spent in all-reduces (waiting for the other ranks included).",
        labels(),
        c.all_reduce_seconds(),
    );
    for (name, help, v) in [
        (
            "pagoda:tp_all_reduce_bytes_total",
            "Bytes all-reduced (each rank's message, counted once).",
            &c.all_reduce_bytes,
        ),
        (
            "pagoda:tp_all_reduces_total",
            "All-reduces run (two per layer per step).",
            &c.all_reduces,
        ),
        (
            "pagoda:tp_gather_bytes_total",
            "Bytes of logits gathered from the ranks' vocabulary slices.",
            &c.gather_bytes,
        ),
    ] {
        e.counter(name, help, labels(), v.load(Ordering::Relaxed));
    }
    e.counter(
        "pagoda:tp_gather_seconds_total",
        "Seconds rank 0 spent gathering the logits.",
        labels(),
        c.gather_seconds(),
    );
}
