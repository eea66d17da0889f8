//! An adapter's part on one tensor-parallel rank, split as the base weights are: the rows of B
//! its column-parallel projections produce (q/k/v by heads, gate/up by FFN columns), the
//! columns of A its row-parallel ones read (o by heads, down by FFN columns), whose partial
//! products the all-reduce after them sums with the base's. Each rank cuts its own parts once
//! per adapter and keeps them while the adapter is in use.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, Weak};

use super::{LoraAdapter, LoraTarget, LoraWeights};
use crate::config::ModelConfig;
use crate::tensor_parallel::Shard;

impl LoraWeights {
    /// Rows `r` of B (outputs `r`), A whole.
    fn out_rows(&self, r: Range<usize>) -> Self {
        let bt = self
            .bt
            .chunks_exact(self.d_out)
            .flat_map(|row| &row[r.clone()])
            .copied()
            .collect();
        Self {
            d_out: r.len(),
            bt,
            a: self.a.clone(),
            ..*self
        }
    }

    /// Columns `r` of A (inputs `r`), B whole.
    fn in_cols(&self, r: Range<usize>) -> Self {
        let a = self
            .a
            .chunks_exact(self.d_in)
            .flat_map(|row| &row[r.clone()])
            .copied()
            .collect();
        Self {
            d_in: r.len(),
            a,
            bt: self.bt.clone(),
            ..*self
        }
    }
}

impl LoraAdapter {
    /// Rank `s`'s part of this adapter over a model of `full` (its whole configuration; the
    /// adapter must fit it). The digest stays the whole adapter's: it names the adapter in the
    /// prefix cache, which rank 0 keeps for all.
    pub fn shard(&self, s: &Shard, full: &ModelConfig) -> Self {
        let hd = full.head_dim;
        let parts = self.parts().map(|(il, t, w)| {
            let part = match t {
                LoraTarget::Q => w.out_rows(Shard::rows(&s.heads, hd)),
                LoraTarget::K | LoraTarget::V => w.out_rows(Shard::rows(&s.kv_heads, hd)),
                LoraTarget::Gate | LoraTarget::Up => w.out_rows(s.ffn.clone()),
                LoraTarget::O => w.in_cols(Shard::rows(&s.heads, hd)),
                LoraTarget::Down => w.in_cols(s.ffn.clone()),
            };
            (il, t, part)
        });
        Self::with_digest(self.n_layers(), parts, self.digest())
    }
}

/// One rank's parts of the adapters it has run, by digest.
#[derive(Default)]
pub(crate) struct LoraShards {
    parts: HashMap<u64, (Weak<LoraAdapter>, Arc<LoraAdapter>)>,
}

impl LoraShards {
    /// This rank's parts of `adapters`, in order (the adapters themselves when the rank holds
    /// the whole model). Parts of adapters no longer alive are dropped.
    pub(crate) fn of(
        &mut self,
        adapters: &[Arc<LoraAdapter>],
        s: &Shard,
        full: &ModelConfig,
    ) -> Vec<Arc<LoraAdapter>> {
        if s.size == 1 {
            return adapters.to_vec();
        }
        self.parts.retain(|_, (whole, _)| whole.strong_count() > 0);
        adapters
            .iter()
            .map(|a| {
                let (whole, part) = self
                    .parts
                    .entry(a.digest())
                    .or_insert_with(|| (Arc::downgrade(a), Arc::new(a.shard(s, full))));
                // Equal digests, equal content: the part serves every copy.
                *whole = Arc::downgrade(a);
                Arc::clone(part)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Three rows of `a` and B over `d_in` = 4, `d_out` = 6.
    fn weights() -> LoraWeights {
        let a: Vec<f32> = (0..12).map(|v| v as f32).collect();
        let b: Vec<f32> = (0..18).map(|v| 100.0 + v as f32).collect();
        LoraWeights::new(3, 4, 6, a, &b, 0.5)
    }

    #[test]
    fn a_part_is_the_rows_or_columns_of_the_dense_update() {
        let w = weights();
        let dense = w.delta(); // [6][4]
        let rows = w.out_rows(2..5).delta();
        assert_eq!(rows, dense[2 * 4..5 * 4]);
        let cols = w.in_cols(1..3).delta();
        let want: Vec<f32> = dense
            .chunks_exact(4)
            .flat_map(|r| r[1..3].to_vec())
            .collect();
        // In-column parts sum to the whole over the ranks; each is its columns.
        assert_eq!(cols, want);
    }
}
