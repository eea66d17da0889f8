//! A context shift's block accounting: a sequence drops whole blocks from the middle of its
//! table, and the blocks after them move to fresh blocks (copy on write: the old ones may be
//! shared or cached, and their KV stays valid for whoever else holds them).

use super::KvCacheManager;
use crate::kv::BlockId;
use crate::request::SeqId;

impl KvCacheManager {
    /// Keeps the first `keep` blocks of `seq`'s table, drops the next `discard`, and moves the
    /// rest to freshly allocated blocks. Returns the `(old, new)` pairs whose KV the executor
    /// copies (re-rotated), or `None`, touching nothing, when the pool is short. The old blocks
    /// are freed at once: the executor copies them before the step's forward pass writes any
    /// block a later allocation hands out. Only a single KV group shifts: sliding-window groups
    /// (which free blocks) are refused at start-up with `--context-shift`.
    pub fn shift(
        &mut self,
        seq: SeqId,
        keep: usize,
        discard: usize,
    ) -> Option<Vec<(BlockId, BlockId)>> {
        let [table] = self.tables.get(&seq)?.as_slice() else {
            return None;
        };
        if keep + discard > table.len() {
            return None;
        }
        let moved = table.len() - keep - discard;
        if moved > self.pool.num_free() {
            return None;
        }
        let fresh = self.pool.allocate(moved)?;
        let table = self.tables.get_mut(&seq)?.first_mut()?;
        let old = table.split_off(keep);
        let pairs: Vec<(BlockId, BlockId)> = old[discard..]
            .iter()
            .copied()
            .zip(fresh.iter().copied())
            .collect();
        table.extend_from_slice(&fresh);
        self.pool.free(old.iter().rev().copied());
        if let Some(n) = self.num_cached_blocks.get_mut(&seq) {
            *n = (*n).min(keep);
        }
        self.in_flight.retain(|_, owner| *owner != seq);
        Some(pairs)
    }
}
