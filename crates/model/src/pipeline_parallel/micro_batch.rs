//! Cutting a step's batch into micro-batches for the pipeline: how many (`count`), and the
//! parts themselves (`split`): contiguous runs of token rows, a cut inside a sequence making
//! its first part a prompt chunk without logits, exactly as chunked prefill would. Every stage
//! runs the parts in order, so a later part's attention reads the earlier part's K and V from
//! the stage's cache, and each row's result is the one the whole batch gives it (the kernels
//! are batch-invariant: `kernels/src/quant/packed/mod.rs`, position-aligned attention tiles).

use std::borrow::Cow;

use crate::ForwardBatch;

/// Rows at which a micro-batch's compute on a stage equals the cost a stage pays once per
/// micro-batch whatever its rows (streaming its weights from memory, the hand-off): measured
/// on Qwen2.5-Coder 0.5B Q4_K_M, one thread, a one-row decode step took 34 ms and a prompt row
/// 8 ms, so the fixed part is about 26 ms, 3-4 rows' compute (docs/tensor-parallel.md,
/// "Pipeline parallelism").
pub const BREAK_EVEN_ROWS: usize = 4;

/// Micro-batches for a step of `rows` token rows over `stages` stages. With `m` parts of
/// `rows / m` rows, each costing a stage `a + b rows / m` (a fixed per-part cost and a per-row
/// one), the pipeline takes `(m + stages - 1)` part-times: more parts shrink the fill and
/// drain bubbles (`stages - 1` part-times) but pay `a` more often. The minimum is at
/// `m = sqrt((stages - 1) rows b / a)`, i.e. `sqrt((stages - 1) rows / BREAK_EVEN_ROWS)`,
/// rounded, at least 1 (a decode step of a few rows stays whole: splitting it would only
/// stream the weights twice) and at most one part per row.
pub fn count(stages: usize, rows: usize) -> usize {
    let ideal = ((stages.saturating_sub(1) * rows) as f64 / BREAK_EVEN_ROWS as f64).sqrt();
    (ideal.round() as usize).clamp(1, rows.max(1))
}

/// One part of a step: its batch and, for each of its logits rows, the row of the step's
/// logits it is.
pub struct MicroBatch<'a> {
    pub batch: Cow<'a, ForwardBatch>,
    pub logits_rows: Vec<u32>,
}

/// `batch` cut into `parts` runs of about equal token rows (fewer when it has fewer rows).
pub fn split(batch: &ForwardBatch, parts: usize) -> Vec<MicroBatch<'_>> {
    let t = batch.num_tokens();
    if parts <= 1 || t <= 1 {
        let n = batch.logits_indices.len() as u32;
        return vec![MicroBatch {
            batch: Cow::Borrowed(batch),
            logits_rows: (0..n).collect(),
        }];
    }
    let mut cuts: Vec<usize> = (0..=parts).map(|k| k * t / parts).collect();
    cuts.dedup();
    cuts.windows(2)
        .map(|w| {
            let (part, logits_rows) = rows(batch, w[0], w[1]);
            MicroBatch {
                batch: Cow::Owned(part),
                logits_rows,
            }
        })
        .collect()
}

/// The batch of token rows `a..b` of `batch`, and the step's logits rows it carries.
fn rows(batch: &ForwardBatch, a: usize, b: usize) -> (ForwardBatch, Vec<u32>) {
    let (t, mb) = (batch.num_tokens(), batch.max_blocks_per_seq);
    let mut out = ForwardBatch {
        token_ids: batch.token_ids[a..b].to_vec(),
        positions: batch.positions[a..b].to_vec(),
        query_start_loc: vec![0],
        max_blocks_per_seq: mb,
        num_groups: batch.num_groups,
        ..ForwardBatch::default()
    };
    let mut seqs = Vec::new();
    for (r, w) in batch.query_start_loc.windows(2).enumerate() {
        let (s0, s1) = (w[0] as usize, w[1] as usize);
        let (lo, hi) = (s0.max(a), s1.min(b));
        if lo >= hi {
            continue;
        }
        seqs.push(r);
        out.query_start_loc.push((hi - a) as u32);
        // A sequence cut here ends, for this part, where its rows in the part end.
        out.seq_lens.push(batch.seq_lens[r] - (s1 - hi) as u32);
        if !batch.seq_loras.is_empty() {
            out.seq_loras.push(batch.seq_loras[r]);
        }
    }
    let s = batch.num_seqs();
    for g in 0..batch.num_groups {
        out.slot_mapping
            .extend_from_slice(&batch.slot_mapping[g * t + a..g * t + b]);
        for &r in &seqs {
            let row = (g * s + r) * mb;
            out.block_tables
                .extend_from_slice(&batch.block_tables[row..row + mb]);
        }
    }
    let mut logits_rows = Vec::new();
    for (k, &i) in batch.logits_indices.iter().enumerate() {
        if (a..b).contains(&(i as usize)) {
            out.logits_indices.push(i - a as u32);
            logits_rows.push(k as u32);
        }
    }
    (out, logits_rows)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::{Logits, SeqChunk};
    use pagoda_core::kv::KvGroup;

    #[test]
    fn the_count_grows_with_the_square_root_of_the_rows() {
        assert_eq!(count(2, 1), 1);
        assert_eq!(count(2, 8), 1);
        assert_eq!(count(2, 32), 3);
        assert_eq!(count(2, 484), 11);
        assert_eq!(count(4, 512), 20);
        assert_eq!(count(1, 512), 1);
    }

    #[test]
    fn parts_cover_the_batch_and_stay_valid() {
        let tables = [vec![0u32, 1, 2], vec![3, 4, 5]];
        let t2 = [vec![6u32, 7, 8], vec![9, 10, 11]];
        let seqs = [
            SeqChunk {
                tokens: &[5; 20],
                start: 3,
                block_tables: &tables,
                logits: Logits::Last,
            },
            SeqChunk {
                tokens: &[7; 1],
                start: 30,
                block_tables: &t2,
                logits: Logits::All,
            },
        ];
        let batch = ForwardBatch::from_seqs(&seqs, 16);
        // Two KV groups: each sequence has a table in both.
        let groups = [KvGroup::FULL, KvGroup::FULL];
        batch.validate(100, 12, 16, &groups).unwrap();
        let parts = split(&batch, 3);
        assert_eq!(parts.len(), 3);
        let mut tokens = Vec::new();
        let mut rows = Vec::new();
        for p in &parts {
            p.batch.validate(100, 12, 16, &groups).unwrap();
            tokens.extend_from_slice(&p.batch.positions);
            rows.extend_from_slice(&p.logits_rows);
        }
        assert_eq!(tokens, batch.positions);
        assert_eq!(rows, [0, 1]);
        // The first sequence's first part ends where its rows do, with no logits.
        assert_eq!(parts[0].batch.seq_lens, [3 + 7]);
        assert!(parts[0].batch.logits_indices.is_empty());
        // The last part holds the first sequence's tail and the second sequence.
        assert_eq!(parts[2].batch.seq_lens, [23, 31]);
        assert_eq!(parts[2].batch.logits_indices, [5, 6]);
        assert_eq!(split(&batch, 1).len(), 1);
    }
}
