//! One step's adapters and which rows use them. The base matmul runs over every row; then each
//! row whose sequence has an adapter gets that adapter's low-rank product added, adapter by
//! adapter over its rows (which then share its A and B from cache), each row on its own, so a
//! row's result does not depend on what else is in the batch.

use std::sync::Arc;

use pagoda_kernels::parallel;

use super::{LoraAdapter, LoraTarget};
use crate::ForwardBatch;

/// A row that uses no adapter.
const NONE: u32 = u32::MAX;

/// The step's adapters and per-row adapter index; reused across steps.
#[derive(Default)]
pub(crate) struct LoraRows {
    adapters: Vec<Arc<LoraAdapter>>,
    /// `[T]` index into `adapters` of every row of the batch, `NONE` for the base model.
    all: Vec<u32>,
    /// The same for the rows a pruned last layer keeps.
    kept: Vec<u32>,
}

impl LoraRows {
    /// Plans the step: `batch.seq_loras` indexes `adapters`; `kept` are the flat rows a pruned
    /// last layer keeps.
    pub(crate) fn plan(
        &mut self,
        batch: &ForwardBatch,
        adapters: &[Arc<LoraAdapter>],
        kept: &[u32],
    ) {
        self.adapters.clear();
        self.all.clear();
        self.kept.clear();
        if batch.seq_loras.iter().all(Option::is_none) {
            return;
        }
        self.adapters.extend(adapters.iter().cloned());
        for (w, slot) in batch.query_start_loc.windows(2).zip(&batch.seq_loras) {
            let n = (w[1] - w[0]) as usize;
            self.all
                .extend(std::iter::repeat_n(slot.unwrap_or(NONE), n));
        }
        self.kept.extend(kept.iter().map(|&i| self.all[i as usize]));
    }

    /// Drops the step's adapter references (so an unloaded adapter is freed once idle).
    pub(crate) fn clear(&mut self) {
        self.adapters.clear();
    }

    /// `y[i] += adapter(i).target(il) x[i]` for every row `i` of `t = y.len() / out` rows that
    /// uses an adapter changing `target` in layer `il`. The rows are the batch's, or the kept
    /// ones when `t` is their count.
    pub(crate) fn add(&self, il: usize, target: LoraTarget, x: &[f32], y: &mut [f32], t: usize) {
        if self.adapters.is_empty() || t == 0 {
            return;
        }
        let rows = if t == self.all.len() {
            &self.all
        } else {
            &self.kept
        };
        debug_assert_eq!(rows.len(), t);
        let (d_in, d_out) = (x.len() / t, y.len() / t);
        let adapters = &self.adapters;
        parallel::for_rows(t, [y], &|r, [y]| {
            // One adapter's rows one after another, so its A and B (up to a few hundred KB per
            // projection) are read from memory once per thread, not once per row when the
            // batch interleaves adapters. Each row is still computed on its own.
            for (ai, a) in adapters.iter().enumerate() {
                let Some(w) = a.get(il, target) else {
                    continue;
                };
                for (j, i) in r.clone().enumerate() {
                    if rows[i] as usize == ai {
                        w.apply(&x[i * d_in..][..d_in], &mut y[j * d_out..][..d_out]);
                    }
                }
            }
        });
    }
}
