//! A pipeline stage's part of one step: the batch cut into micro-batches, each taken from the
//! previous stage (or embedded, on stage 0), run through the stage's layers (adding its
//! sequences' adapters) and passed on (or, on the last stage, through the LM head and back to
//! rank 0, which lays the logits rows out in the step's order). Stage 0 sends every micro-batch before it waits for logits, so with
//! two stages it runs micro-batch 1 while stage 1 runs micro-batch 0.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::micro_batch;
use super::stage::PpStage;
use crate::lora::LoraAdapter;
use crate::models::{ForwardScratch, Model, ensure};
use crate::{ForwardBatch, KvCache};

/// This stage's part of one step; on stage 0, the step's logits rows
/// `[logits_indices.len()][vocab]` (other stages return nothing).
pub(crate) fn run<'s>(
    st: &PpStage,
    m: &Model,
    batch: &ForwardBatch,
    adapters: &[Arc<LoraAdapter>],
    kv: &mut KvCache,
    s: &'s mut ForwardScratch,
) -> &'s [f32] {
    let count = st
        .micro_batches
        .unwrap_or_else(|| micro_batch::count(st.size, batch.num_tokens()));
    let parts = micro_batch::split(batch, count);
    let (d, vocab) = (m.config().d_model, m.config().vocab_size);
    if st.is_first() {
        let c = &st.counters;
        c.micro_batches
            .fetch_add(parts.len() as u64, Ordering::Relaxed);
        c.steps.fetch_add(1, Ordering::Relaxed);
    }
    for p in &parts {
        let b = p.batch.as_ref();
        let t = b.num_tokens();
        if st.is_first() {
            m.embed(b, s);
        } else {
            s.x = st.recv(st.stage - 1, t * d);
        }
        let pruned = m.run_layers(b, adapters, kv, s);
        if st.is_last() {
            let logits = m.head(b, pruned, s);
            st.send(0, logits);
        } else {
            st.send(st.stage + 1, &s.x[..t * d]);
        }
    }
    if !st.is_first() {
        return &[];
    }
    let n = batch.logits_indices.len();
    let out = ensure(&mut s.logits, n * vocab);
    for p in &parts {
        let rows = st.recv(st.size - 1, p.logits_rows.len() * vocab);
        for (row, &k) in rows.chunks_exact(vocab).zip(&p.logits_rows) {
            out[k as usize * vocab..][..vocab].copy_from_slice(row);
        }
    }
    &s.logits[..n * vocab]
}
