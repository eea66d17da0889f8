//! Per-sequence block tables over the block pool: prefix-cache lookup at admission,
//! `allocate_slots` (which answers `None` when the pool is short and leaves the choice of a
//! victim to the scheduler), registering newly full blocks, and freeing.

use std::collections::HashMap;

use super::block_hash::BlockHash;
use super::block_pool::{BlockId, BlockPool};
use super::kv_events::{KvEvent, KvEventLog};
use crate::request::{Request, SeqId};

/// Prefix-cache counters, in tokens (vLLM's `prefix_cache_queries` / `_hits`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PrefixCacheStats {
    pub queried_tokens: u64,
    pub hit_tokens: u64,
}

/// A prefix-cache hit found at admission, not yet claimed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ComputedBlocks {
    pub blocks: Vec<BlockId>,
    pub num_tokens: usize,
}

/// Block accounting for every sequence that holds KV.
#[derive(Debug)]
pub struct KvCacheManager {
    pool: BlockPool,
    block_size: usize,
    enable_caching: bool,
    tables: HashMap<SeqId, Vec<BlockId>>,
    /// Blocks of each sequence already registered in the cache (a prefix of its table).
    num_cached_blocks: HashMap<SeqId, usize>,
    /// Hashes of blocks allocated to a running sequence and being computed now: a sequence with
    /// the same prefix waits for them instead of computing the same KV a second time.
    in_flight: HashMap<BlockHash, SeqId>,
    pub stats: PrefixCacheStats,
}

impl KvCacheManager {
    pub fn new(num_blocks: usize, block_size: usize, enable_caching: bool) -> Self {
        Self {
            pool: BlockPool::new(num_blocks),
            block_size,
            enable_caching,
            tables: HashMap::new(),
            num_cached_blocks: HashMap::new(),
            in_flight: HashMap::new(),
            stats: PrefixCacheStats::default(),
        }
    }

    pub fn pool(&self) -> &BlockPool {
        &self.pool
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// Starts recording KV cache events (`take_events`); a no-op without prefix caching,
    /// where nothing is ever cached.
    pub fn enable_events(&mut self) {
        if self.enable_caching {
            self.pool.enable_events(self.block_size);
        }
    }

    /// The events since the last call (empty when events are off).
    pub fn take_events(&mut self) -> Vec<KvEvent> {
        self.pool
            .events_mut()
            .map(KvEventLog::take)
            .unwrap_or_default()
    }

    /// A clear followed by every cached block, replacing the pending events.
    pub fn resync_events(&mut self) -> Vec<KvEvent> {
        self.pool
            .events_mut()
            .map(KvEventLog::resync)
            .unwrap_or_default()
    }

    pub fn caching_enabled(&self) -> bool {
        self.enable_caching
    }

    /// The blocks of `seq`, in position order.
    pub fn block_table(&self, seq: SeqId) -> &[BlockId] {
        self.tables.get(&seq).map_or(&[], Vec::as_slice)
    }

    /// Fraction of blocks owned by some sequence.
    pub fn usage(&self) -> f64 {
        let n = self.pool.num_blocks();
        if n == 0 {
            0.0
        } else {
            self.pool.num_used() as f64 / n as f64
        }
    }

    /// The longest chain of cached blocks that starts `req`'s tokens, capped so at least one
    /// token is left to compute (its logits are needed).
    pub fn get_computed_blocks(&mut self, req: &Request) -> ComputedBlocks {
        if !self.enable_caching || !req.uses_prefix_cache() {
            return ComputedBlocks::default();
        }
        let max_blocks = (req.num_tokens() - 1) / self.block_size;
        let mut blocks = Vec::new();
        for &h in req.block_hashes.iter().take(max_blocks) {
            match self.pool.lookup(h) {
                Some(id) => blocks.push(id),
                None => break,
            }
        }
        let num_tokens = blocks.len() * self.block_size;
        ComputedBlocks { blocks, num_tokens }
    }

    /// Counts an admission's lookup: `queried` tokens, `hit` of them found cached.
    pub fn record_query(&mut self, queried: usize, hit: usize) {
        if self.enable_caching {
            self.stats.queried_tokens += queried as u64;
            self.stats.hit_tokens += hit as u64;
        }
    }

    /// Whether the block after a hit of `hit_blocks` blocks is being computed right now by
    /// another sequence (so waiting one step or a few saves recomputing it).
    pub fn next_block_in_flight(&self, req: &Request, hit_blocks: usize) -> bool {
        if !self.enable_caching || !req.uses_prefix_cache() {
            return false;
        }
        let max_blocks = (req.num_tokens() - 1) / self.block_size;
        hit_blocks < max_blocks
            && req
                .block_hashes
                .get(hit_blocks)
                .and_then(|h| self.in_flight.get(h))
                .is_some_and(|&owner| owner != req.seq_id)
    }

    /// Gives `req` slots for `num_new_tokens` more tokens after `computed` (a hit found by
    /// `get_computed_blocks`, empty for a running sequence). Returns the newly allocated block
    /// ids (hits first), or `None`, touching nothing, when the pool is short.
    pub fn allocate_slots(
        &mut self,
        req: &Request,
        num_new_tokens: usize,
        computed: &ComputedBlocks,
    ) -> Option<Vec<BlockId>> {
        let have = self.tables.get(&req.seq_id).map_or(0, Vec::len);
        let total_tokens = req.num_computed_tokens + computed.num_tokens + num_new_tokens;
        let need = total_tokens.div_ceil(self.block_size);
        let fresh = need.saturating_sub(have + computed.blocks.len());
        // Hits sitting in the free queue leave it when claimed, so they count against it too.
        if fresh + self.pool.count_free(&computed.blocks) > self.pool.num_free() {
            return None;
        }
        self.pool.touch(&computed.blocks);
        let new_blocks = self.pool.allocate(fresh)?;
        let table = self.tables.entry(req.seq_id).or_default();
        if !computed.blocks.is_empty() {
            debug_assert!(table.is_empty(), "hits only at admission");
            table.extend_from_slice(&computed.blocks);
            self.num_cached_blocks
                .insert(req.seq_id, computed.blocks.len());
        }
        let first_new = table.len();
        table.extend_from_slice(&new_blocks);
        if self.enable_caching && req.uses_prefix_cache() {
            for (i, _) in new_blocks.iter().enumerate() {
                if let Some(&h) = req.block_hashes.get(first_new + i) {
                    self.in_flight.entry(h).or_insert(req.seq_id);
                }
            }
        }
        let mut out = computed.blocks.clone();
        out.extend_from_slice(&new_blocks);
        Some(out)
    }

    /// Registers every block of `req` that its computed tokens have filled.
    pub fn cache_full_blocks(&mut self, req: &Request) {
        if !self.enable_caching || !req.uses_prefix_cache() {
            return;
        }
        let Some(table) = self.tables.get(&req.seq_id) else {
            return;
        };
        let full = (req.num_computed_tokens / self.block_size)
            .min(req.block_hashes.len())
            .min(table.len());
        let done = self.num_cached_blocks.entry(req.seq_id).or_insert(0);
        // Runs of newly cached blocks, for KV events: [start, end) block indices.
        let mut runs: Vec<(usize, usize)> = Vec::new();
        for (i, (&h, &block)) in req.block_hashes[*done..full]
            .iter()
            .zip(&table[*done..full])
            .enumerate()
        {
            let i = *done + i;
            if self.pool.cache(block, h) {
                match runs.last_mut() {
                    Some(r) if r.1 == i => r.1 = i + 1,
                    _ => runs.push((i, i + 1)),
                }
            }
            if self.in_flight.get(&h) == Some(&req.seq_id) {
                self.in_flight.remove(&h);
            }
        }
        *done = (*done).max(full);
        if let Some(log) = self.pool.events_mut() {
            let bs = self.block_size;
            for (start, end) in runs {
                log.stored(
                    &req.block_hashes[start..end],
                    start.checked_sub(1).map(|p| req.block_hashes[p]),
                    &req.token_ids[start * bs..end * bs],
                    req.hash_chain.lora_id(),
                );
            }
        }
    }

    /// Gives back the blocks of `req` past those its computed tokens fill (slots reserved for
    /// speculative tokens that were rejected), tail first. They were claimed this step and never
    /// registered in the cache, so no other sequence holds them.
    pub fn trim(&mut self, req: &Request) {
        let keep = req.num_computed_tokens.div_ceil(self.block_size);
        let Some(table) = self.tables.get_mut(&req.seq_id) else {
            return;
        };
        if table.len() <= keep {
            return;
        }
        let cut = table.split_off(keep);
        for (i, _) in cut.iter().enumerate() {
            if let Some(h) = req.block_hashes.get(keep + i)
                && self.in_flight.get(h) == Some(&req.seq_id)
            {
                self.in_flight.remove(h);
            }
        }
        self.pool.free(cut.iter().rev().copied());
    }

    /// Releases every block of `seq`, tail first (so its tail is evicted first).
    pub fn free(&mut self, seq: SeqId) {
        if let Some(table) = self.tables.remove(&seq) {
            self.pool.free(table.iter().rev().copied());
        }
        self.num_cached_blocks.remove(&seq);
        self.in_flight.retain(|_, owner| *owner != seq);
    }

    /// Number of sequences holding blocks.
    pub fn num_tables(&self) -> usize {
        self.tables.len()
    }

    /// Checks that ref counts equal the number of tables holding each block (tests).
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut owners = vec![0u32; self.pool.num_blocks()];
        for table in self.tables.values() {
            for &b in table {
                owners[b as usize] += 1;
            }
        }
        for (id, &n) in owners.iter().enumerate() {
            let rc = self.pool.ref_cnt(id as BlockId);
            if rc != n {
                return Err(format!("block {id}: ref_cnt {rc} but {n} owners"));
            }
        }
        let free = owners.iter().filter(|&&n| n == 0).count();
        if free != self.pool.num_free() || self.pool.free_queue().len() != free {
            return Err(format!(
                "{free} unowned blocks but the free queue has {} (count {})",
                self.pool.free_queue().len(),
                self.pool.num_free()
            ));
        }
        Ok(())
    }
}
