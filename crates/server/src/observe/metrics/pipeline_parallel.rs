//! Pipeline parallelism on `/metrics` (`--pipeline-parallel-size` > 1): the stages, the bytes
//! and time of the hand-offs between them (the residual stream forward, the logits back to
//! rank 0), the micro-batches, and each stage's time waiting for its input (the bubbles).

use std::sync::atomic::Ordering;

use pagoda_exposition::{Exposition, Scraped};
use pagoda_model::PpCounters;

use crate::observe::metrics::labels::model_labels;

pub(crate) fn render(e: &mut Exposition, model_name: &str, stages: usize, c: &PpCounters) {
    let labels = || model_labels(model_name);
    e.gauge(
        "pagoda:pp_size",
        "Pipeline stages the model's layers are cut into.",
        labels(),
        stages as u64,
    );
    e.counter(
        "pagoda:pp_transfer_seconds_total",
        "Seconds the stages spent handing data to the next stage (all stages).",
        labels(),
        c.transfer_seconds(),
    );
    for (name, help, v) in [
        (
            "pagoda:pp_transfer_bytes_total",
            "Bytes handed between stages (residual stream and logits).",
            &c.transfer_bytes,
        ),
        (
            "pagoda:pp_transfers_total",
            "Hand-offs between stages.",
            &c.transfers,
        ),
        (
            "pagoda:pp_micro_batches_total",
            "Micro-batches the steps were cut into.",
            &c.micro_batches,
        ),
        ("pagoda:pp_steps_total", "Pipeline steps run.", &c.steps),
    ] {
        e.counter(name, help, labels(), v.load(Ordering::Relaxed));
    }
    let waits = (0..stages).map(|s| {
        let mut l = labels();
        l.push(("stage", s.to_string()));
        (l, c.wait_seconds(s).into())
    });
    e.scraped(
        "pagoda:pp_stage_wait_seconds_total",
        "Seconds each stage waited for its input (pipeline bubbles and slower stages; stage 0 also waits for the last stage's logits).",
        Scraped::counters(waits),
    );
}
