//! The block accounting of a lower KV tier (the disk store): which evicted blocks the executor
//! saves, which blocks past a memory hit the tier holds, and blocks read back installed as
//! ordinary cached blocks (hash set, unowned, in the free queue), so the next
//! `get_computed_blocks` claims them like any other hit and every pool invariant holds.

use std::sync::Arc;

use super::KvCacheManager;
use crate::kv::block_hash::BlockHash;
use crate::kv::kv_group::group_key;
use crate::kv::kv_tier::{KvLoad, KvTier, PendingLoad};
use crate::kv::{BlockId, NULL_BLOCK};
use crate::request::Request;

impl KvCacheManager {
    /// Attaches a lower tier: evicted cached blocks are recorded from now on (for
    /// `take_saves`). A no-op without prefix caching, where nothing is ever cached.
    pub fn set_tier(&mut self, tier: Arc<dyn KvTier>) {
        if self.enable_caching {
            if tier.takes_saves() {
                self.pool.record_evictions();
            }
            self.tier = Some(tier);
        }
    }

    /// The lower tier, when one is attached (it may have turned itself off since).
    pub fn tier(&self) -> Option<&Arc<dyn KvTier>> {
        self.tier.as_ref()
    }

    /// Evicted blocks whose bytes the tier lacks, `(block, group key)` in eviction order: the
    /// executor copies them out before this step's forward pass overwrites them.
    pub fn take_saves(&mut self) -> Vec<(BlockId, BlockHash)> {
        let mut ev = self.pool.take_evictions();
        match self.tier() {
            Some(t) if t.enabled() && t.takes_saves() => ev.retain(|(_, key)| !t.contains(key)),
            _ => ev.clear(),
        }
        ev
    }

    /// Blocks of `req` after a memory hit of `hit` blocks that the tier holds in every group,
    /// as (number of blocks, their group keys block-major), capped like
    /// `get_computed_blocks` so the last prompt token is always computed; and how many blocks
    /// past the hit were looked up.
    pub fn tier_hit(&self, req: &Request, hit: usize) -> (usize, Vec<BlockHash>, usize) {
        let Some(tier) = self.tier().filter(|t| t.enabled()) else {
            return (0, Vec::new(), 0);
        };
        if !req.uses_prefix_cache() || req.num_tokens() == 0 {
            return (0, Vec::new(), 0);
        }
        let max_blocks = ((req.num_tokens() - 1) / self.block_size).min(req.block_hashes.len());
        let groups = self.groups.len();
        let mut keys = Vec::new();
        let mut n = 0;
        for &h in req.block_hashes.iter().take(max_blocks).skip(hit) {
            let block: Vec<BlockHash> = (0..groups).map(|g| group_key(h, g)).collect();
            if !block.iter().all(|k| tier.contains(k)) {
                break;
            }
            keys.extend(block);
            n += 1;
        }
        (n, keys, max_blocks.saturating_sub(hit))
    }

    /// Installs the first `read` keys of `load` (read intact by the tier) as cached free
    /// blocks, whole table entries only and as many as the free queue holds; `req`'s current
    /// memory hit is held meanwhile so installing never evicts it. Returns what the executor
    /// writes into each block this step (empty: nothing installed).
    pub fn install(&mut self, req: &Request, load: &PendingLoad, read: usize) -> Vec<KvLoad> {
        let groups = self.groups.len();
        let whole = (read / groups).min(load.num_blocks);
        let hit = self.get_computed_blocks(req);
        let held: Vec<BlockId> = hit
            .blocks
            .iter()
            .flatten()
            .copied()
            .filter(|&b| b != NULL_BLOCK)
            .collect();
        self.pool.touch(&held);
        let mut wanted = Vec::new();
        for j in load.first_block..load.first_block + whole {
            let Some(&h) = req.block_hashes.get(j) else {
                break;
            };
            for g in 0..groups {
                let key = group_key(h, g);
                if self.pool.lookup(key).is_none() {
                    wanted.push((j, g, key));
                }
            }
        }
        wanted.truncate(self.pool.num_free());
        let ids = self.pool.allocate(wanted.len()).unwrap_or_default();
        let mut loads = Vec::with_capacity(ids.len());
        let bs = self.block_size;
        for (&b, &(j, g, key)) in ids.iter().zip(&wanted) {
            self.block_group[b as usize] = g as u16;
            if self.pool.cache(b, key) {
                loads.push(KvLoad {
                    block_id: b,
                    key,
                    ticket: load.ticket,
                });
                // A stored block like any other for KV events (first group only, as there).
                if g == 0
                    && let Some(log) = self.pool.events_mut()
                {
                    log.stored(
                        &req.block_hashes[j..=j],
                        j.checked_sub(1).map(|p| req.block_hashes[p]),
                        &req.token_ids[j * bs..(j + 1) * bs],
                        req.hash_chain.lora_id(),
                    );
                }
            }
        }
        // Last blocks first into the free queue, so the prefix's head is evicted last.
        self.pool.free(ids.iter().rev().copied());
        self.pool.free(held);
        loads
    }

    /// Every block the memory cache holds now, `(block, group key)`: what a shutdown saves.
    pub fn cached_blocks(&self) -> Vec<(BlockId, BlockHash)> {
        let mut out: Vec<(BlockId, BlockHash)> = self
            .pool
            .cached_hashes()
            .filter_map(|h| Some((self.pool.lookup(*h)?, *h)))
            .collect();
        out.sort_unstable_by_key(|&(b, _)| b);
        out
    }
}
