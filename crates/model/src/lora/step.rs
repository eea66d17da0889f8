//! One step's adapters and which rows use them. The base matmul runs over every row; then the
//! rows of each adapter get its low-rank product added, adapter by adapter (`kernels::lora`
//! splits the work by adapter, so each adapter's weights are read by a few tasks, not per row), each row
//! computed on its own, so a row's result does not depend on what else is in the batch.

use std::sync::Arc;

use pagoda_kernels::lora::{LoraGroups, lora_add};

use super::{LoraAdapter, LoraTarget};
use crate::ForwardBatch;

/// The step's adapters and their rows; reused across steps.
#[derive(Default)]
pub(crate) struct LoraRows {
    adapters: Vec<Arc<LoraAdapter>>,
    /// Each row's adapter (an index into `adapters`), every row of the batch.
    owner: Vec<Option<u32>>,
    /// The batch's rows grouped by adapter.
    all: LoraGroups,
    /// The same for the rows a pruned last layer keeps.
    kept: LoraGroups,
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
        self.owner.clear();
        if batch.seq_loras.iter().all(Option::is_none) {
            return;
        }
        self.adapters.extend(adapters.iter().cloned());
        for (w, &slot) in batch.query_start_loc.windows(2).zip(&batch.seq_loras) {
            let n = (w[1] - w[0]) as usize;
            self.owner.extend(std::iter::repeat_n(slot, n));
        }
        let n = self.adapters.len();
        self.all.plan(self.owner.iter().copied(), n);
        let owner = &self.owner;
        self.kept.plan(kept.iter().map(|&i| owner[i as usize]), n);
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
        let groups = if t == self.all.rows() {
            &self.all
        } else {
            &self.kept
        };
        debug_assert_eq!(groups.rows(), t);
        let adapters = &self.adapters;
        lora_add(x, y, groups, &|g| {
            adapters
                .get(g)
                .and_then(|a| a.get(il, target))
                .map(|w| w.mats())
        });
    }
}
