//! Per-sequence block tables over the block pool, one table per KV group (full attention or a
//! sliding window): prefix-cache lookup at admission, `allocate_slots` (which answers `None`
//! when the pool is short and leaves the choice of a victim to the scheduler), registering
//! newly full blocks, giving back blocks that slid out of a window, and freeing.

use std::collections::HashMap;

use super::block_hash::BlockHash;
use super::block_pool::{BlockId, BlockPool};
use super::kv_events::{KvEvent, KvEventLog};
use super::kv_group::{KvGroup, NULL_BLOCK, group_key};
use super::kv_tier::KvTier;
use crate::request::{Request, SeqId};

/// Prefix-cache counters, in tokens (vLLM's `prefix_cache_queries` / `_hits`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PrefixCacheStats {
    pub queried_tokens: u64,
    pub hit_tokens: u64,
}

/// A prefix-cache hit found at admission, not yet claimed: per group, the table entries for
/// the first `num_tokens` tokens (`NULL_BLOCK` where a sliding group needs nothing).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ComputedBlocks {
    pub blocks: Vec<Vec<BlockId>>,
    pub num_tokens: usize,
}

impl ComputedBlocks {
    /// Blocks of the hit (table entries per group).
    pub fn num_blocks(&self) -> usize {
        self.blocks.first().map_or(0, Vec::len)
    }

    fn real(&self) -> impl Iterator<Item = BlockId> + '_ {
        self.blocks
            .iter()
            .flatten()
            .copied()
            .filter(|&b| b != NULL_BLOCK)
    }
}

/// Block accounting for every sequence that holds KV.
#[derive(Debug)]
pub struct KvCacheManager {
    pool: BlockPool,
    block_size: usize,
    enable_caching: bool,
    groups: Vec<KvGroup>,
    /// Per sequence, per group, position-ordered entries (all groups' tables have one length).
    tables: HashMap<SeqId, Vec<Vec<BlockId>>>,
    /// Table entries of each sequence already registered in the cache (a prefix of its table).
    num_cached_blocks: HashMap<SeqId, usize>,
    /// Hashes of blocks allocated to a running sequence and being computed now: a sequence with
    /// the same prefix waits for them instead of computing the same KV a second time.
    in_flight: HashMap<BlockHash, SeqId>,
    /// The group each block was last handed to, and how many blocks each group holds.
    block_group: Vec<u16>,
    held: Vec<usize>,
    pub stats: PrefixCacheStats,
    /// The lower tier (disk) evicted blocks go to and hits may be read back from.
    tier: Option<std::sync::Arc<dyn KvTier>>,
}

mod shift;
mod tier;
mod transfer;

impl KvCacheManager {
    /// One full-attention group.
    pub fn new(num_blocks: usize, block_size: usize, enable_caching: bool) -> Self {
        Self::with_groups(num_blocks, block_size, enable_caching, vec![KvGroup::FULL])
    }

    /// One table per sequence for each of `groups` (at least one), over one pool.
    pub fn with_groups(
        num_blocks: usize,
        block_size: usize,
        enable_caching: bool,
        groups: Vec<KvGroup>,
    ) -> Self {
        let groups = if groups.is_empty() {
            vec![KvGroup::FULL]
        } else {
            groups
        };
        Self {
            pool: BlockPool::new(num_blocks),
            block_size,
            enable_caching,
            held: vec![0; groups.len()],
            groups,
            tables: HashMap::new(),
            num_cached_blocks: HashMap::new(),
            in_flight: HashMap::new(),
            block_group: vec![0; num_blocks],
            stats: PrefixCacheStats::default(),
            tier: None,
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

    pub fn groups(&self) -> &[KvGroup] {
        &self.groups
    }

    /// The tables of `seq`, one per group, in position order (`NULL_BLOCK` where given back).
    pub fn block_tables(&self, seq: SeqId) -> &[Vec<BlockId>] {
        self.tables.get(&seq).map_or(&[], Vec::as_slice)
    }

    /// Table entries of `seq` (the same in every group).
    pub fn table_len(&self, seq: SeqId) -> usize {
        self.block_tables(seq).first().map_or(0, Vec::len)
    }

    /// Blocks `seq` holds over all groups.
    pub fn num_held_blocks(&self, seq: SeqId) -> usize {
        self.block_tables(seq)
            .iter()
            .flatten()
            .filter(|&&b| b != NULL_BLOCK)
            .count()
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

    /// Blocks owned by some sequence, per group.
    pub fn held_per_group(&self) -> &[usize] {
        &self.held
    }

    /// The longest prefix of `req` every group can serve from the cache, capped so at least
    /// one token is left to compute (its logits are needed): full groups need each block of
    /// it, sliding groups only the blocks the first computed token's window reaches.
    pub fn get_computed_blocks(&mut self, req: &Request) -> ComputedBlocks {
        if !self.enable_caching || !req.uses_prefix_cache() {
            return ComputedBlocks::default();
        }
        let max_blocks = (req.num_tokens() - 1) / self.block_size;
        let hashes = &req.block_hashes[..max_blocks.min(req.block_hashes.len())];
        let lookup = |g: usize, j: usize| self.pool.lookup(group_key(hashes[j], g));
        let full: Vec<usize> = (0..self.groups.len())
            .filter(|&g| self.groups[g].sliding_window.is_none())
            .collect();
        let mut n = hashes
            .iter()
            .enumerate()
            .take_while(|&(j, _)| full.iter().all(|&g| lookup(g, j).is_some()))
            .count();
        // Each sliding group may shorten the hit; shortening never breaks a full group's
        // hit, and a later sliding group's cut can only shorten further: iterate to a fixpoint.
        loop {
            let before = n;
            for (g, group) in self.groups.iter().enumerate() {
                if group.sliding_window.is_some() {
                    n = self.sliding_hit(g, group, hashes, n);
                }
            }
            if n == before {
                break;
            }
        }
        let blocks = self
            .groups
            .iter()
            .enumerate()
            .map(|(g, group)| {
                let skip = group.first_needed_block(n * self.block_size, self.block_size);
                (0..n)
                    .map(|j| {
                        if j < skip {
                            NULL_BLOCK
                        } else {
                            lookup(g, j).unwrap_or(NULL_BLOCK)
                        }
                    })
                    .collect()
            })
            .collect();
        ComputedBlocks {
            blocks,
            num_tokens: n * self.block_size,
        }
    }

    /// The longest hit of at most `n` blocks whose last window is cached in sliding group `g`.
    fn sliding_hit(&self, g: usize, group: &KvGroup, hashes: &[BlockHash], n: usize) -> usize {
        // run = consecutive cached blocks ending at block m - 1.
        let mut runs = Vec::with_capacity(n);
        let mut run = 0;
        for &h in &hashes[..n] {
            run = if self.pool.lookup(group_key(h, g)).is_some() {
                run + 1
            } else {
                0
            };
            runs.push(run);
        }
        (1..=n)
            .rev()
            .find(|&m| {
                m - group.first_needed_block(m * self.block_size, self.block_size) <= runs[m - 1]
            })
            .unwrap_or(0)
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
    /// `get_computed_blocks`, empty for a running sequence). Returns, per group, the new table
    /// entries (hits first), or `None`, touching nothing, when the pool is short. A sliding
    /// group gets `NULL_BLOCK` for entries its window no longer reaches.
    pub fn allocate_slots(
        &mut self,
        req: &Request,
        num_new_tokens: usize,
        computed: &ComputedBlocks,
    ) -> Option<Vec<Vec<BlockId>>> {
        let have = self.table_len(req.seq_id);
        let hit = computed.num_blocks();
        let first_pos = req.num_computed_tokens + computed.num_tokens;
        let total_tokens = first_pos + num_new_tokens;
        let need = total_tokens.div_ceil(self.block_size);
        let new_entries = need.saturating_sub(have + hit);
        let skips: Vec<usize> = self
            .groups
            .iter()
            .map(|g| g.first_needed_block(first_pos, self.block_size))
            .collect();
        let fresh_of = |skip: usize| (have + hit..need).filter(|&j| j >= skip).count();
        let fresh: usize = skips.iter().map(|&s| fresh_of(s)).sum();
        // Hits sitting in the free queue leave it when claimed, so they count against it too.
        let claimed: Vec<BlockId> = computed.real().collect();
        if fresh + self.pool.count_free(&claimed) > self.pool.num_free() {
            return None;
        }
        for &b in &claimed {
            if self.pool.ref_cnt(b) == 0 {
                self.held[self.block_group[b as usize] as usize] += 1;
            }
        }
        self.pool.touch(&claimed);
        let mut new_blocks = self.pool.allocate(fresh)?.into_iter();
        let mut out = Vec::with_capacity(self.groups.len());
        let tables = self
            .tables
            .entry(req.seq_id)
            .or_insert_with(|| vec![Vec::new(); self.groups.len()]);
        for (g, &skip) in skips.iter().enumerate() {
            let mut entries = computed.blocks.get(g).cloned().unwrap_or_default();
            entries.resize(hit, NULL_BLOCK);
            for j in have + hit..have + hit + new_entries {
                entries.push(if j < skip {
                    NULL_BLOCK
                } else {
                    match new_blocks.next() {
                        Some(b) => {
                            self.block_group[b as usize] = g as u16;
                            self.held[g] += 1;
                            b
                        }
                        None => NULL_BLOCK, // not reached: `fresh` counted these entries
                    }
                });
            }
            tables[g].extend_from_slice(&entries);
            out.push(entries);
        }
        if hit > 0 {
            debug_assert_eq!(have, 0, "hits only at admission");
            self.num_cached_blocks.insert(req.seq_id, hit);
        }
        if self.enable_caching && req.uses_prefix_cache() {
            for h in req.block_hashes.iter().take(need).skip(have + hit) {
                self.in_flight.entry(*h).or_insert(req.seq_id);
            }
        }
        Some(out)
    }

    /// Registers every block of `req` that its computed tokens have filled, then gives back
    /// the blocks no future query of a sliding group reads.
    pub fn cache_full_blocks(&mut self, req: &Request) {
        self.register_full_blocks(req);
        self.free_outside_window(req);
    }

    fn register_full_blocks(&mut self, req: &Request) {
        if !self.enable_caching || !req.uses_prefix_cache() {
            return;
        }
        let Some(tables) = self.tables.get(&req.seq_id) else {
            return;
        };
        let full = (req.num_computed_tokens / self.block_size)
            .min(req.block_hashes.len())
            .min(tables[0].len());
        let done = self.num_cached_blocks.entry(req.seq_id).or_insert(0);
        // Runs of newly cached blocks of the first group, for KV events: [start, end) block
        // indices. The first group is a full-attention one whenever the model has one
        // (`KvGroupPlan` puts them first), and its keys are the block hashes themselves.
        // Collected only when events are on: no work per step otherwise.
        let publish = self.pool.events_on();
        let mut runs: Vec<(usize, usize)> = Vec::new();
        for j in *done..full {
            let h = req.block_hashes[j];
            for (g, table) in tables.iter().enumerate() {
                if table[j] != NULL_BLOCK
                    && self.pool.cache(table[j], group_key(h, g))
                    && g == 0
                    && publish
                {
                    match runs.last_mut() {
                        Some(r) if r.1 == j => r.1 = j + 1,
                        _ => runs.push((j, j + 1)),
                    }
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

    /// Sliding groups give back every block wholly before the window of `req`'s next token.
    fn free_outside_window(&mut self, req: &Request) {
        let Some(tables) = self.tables.get_mut(&req.seq_id) else {
            return;
        };
        let mut gone = Vec::new();
        for (g, group) in self.groups.iter().enumerate() {
            let skip = group
                .first_needed_block(req.num_computed_tokens, self.block_size)
                .min(tables[g].len());
            // Oldest first: they stay cached the longest, as they were computed first.
            for e in &mut tables[g][..skip] {
                if *e != NULL_BLOCK {
                    gone.push(std::mem::replace(e, NULL_BLOCK));
                }
            }
        }
        self.release(gone.into_iter().rev());
    }

    /// Gives back the blocks of `req` past those its computed tokens fill (slots reserved for
    /// speculative tokens that were rejected), tail first. They were claimed this step and never
    /// registered in the cache, so no other sequence holds them.
    pub fn trim(&mut self, req: &Request) {
        let keep = req.num_computed_tokens.div_ceil(self.block_size);
        let Some(tables) = self.tables.get_mut(&req.seq_id) else {
            return;
        };
        if tables[0].len() <= keep {
            return;
        }
        let mut cut = Vec::new();
        for t in tables.iter_mut() {
            cut.extend(t.split_off(keep).into_iter().rev());
        }
        let len = cut.len() / self.groups.len();
        for h in req.block_hashes.iter().skip(keep).take(len) {
            if self.in_flight.get(h) == Some(&req.seq_id) {
                self.in_flight.remove(h);
            }
        }
        self.release(cut);
    }

    /// Releases every block of `seq`, tail first (so its tail is evicted first).
    pub fn free(&mut self, seq: SeqId) {
        if let Some(tables) = self.tables.remove(&seq) {
            let len = tables.first().map_or(0, Vec::len);
            let order = (0..len)
                .rev()
                .flat_map(|j| tables.iter().map(move |t| t[j]))
                .collect::<Vec<_>>();
            self.release(order);
        }
        self.num_cached_blocks.remove(&seq);
        self.in_flight.retain(|_, owner| *owner != seq);
    }

    /// Drops one owner of each real block of `ids`, in order, keeping the per-group counts.
    fn release(&mut self, ids: impl IntoIterator<Item = BlockId>) {
        for b in ids {
            if b == NULL_BLOCK {
                continue;
            }
            self.pool.free([b]);
            if self.pool.ref_cnt(b) == 0 {
                let g = self.block_group[b as usize] as usize;
                self.held[g] = self.held[g].saturating_sub(1);
            }
        }
    }

    /// Number of sequences holding blocks.
    pub fn num_tables(&self) -> usize {
        self.tables.len()
    }

    /// Checks that ref counts equal the number of table entries holding each block, that the
    /// free queue holds exactly the unowned blocks, that no block serves two groups, and that
    /// the per-group counts match (tests).
    pub fn check_invariants(&self) -> Result<(), String> {
        let n = self.pool.num_blocks();
        let mut owners = vec![0u32; n];
        let mut group_of = vec![None; n];
        for tables in self.tables.values() {
            if tables.len() != self.groups.len() {
                return Err(format!(
                    "{} tables for {} groups",
                    tables.len(),
                    self.groups.len()
                ));
            }
            if tables.iter().any(|t| t.len() != tables[0].len()) {
                return Err("group tables of one sequence differ in length".into());
            }
            for (g, table) in tables.iter().enumerate() {
                for &b in table.iter().filter(|&&b| b != NULL_BLOCK) {
                    owners[b as usize] += 1;
                    if *group_of[b as usize].get_or_insert(g) != g {
                        return Err(format!("block {b} is in two groups' tables"));
                    }
                }
            }
        }
        for (id, &c) in owners.iter().enumerate() {
            let rc = self.pool.ref_cnt(id as BlockId);
            if rc != c {
                return Err(format!("block {id}: ref_cnt {rc} but {c} owners"));
            }
        }
        let free = owners.iter().filter(|&&c| c == 0).count();
        if free != self.pool.num_free() || self.pool.free_queue().len() != free {
            return Err(format!(
                "{free} unowned blocks but the free queue has {} (count {})",
                self.pool.free_queue().len(),
                self.pool.num_free()
            ));
        }
        for g in 0..self.groups.len() {
            let c = group_of.iter().filter(|&&x| x == Some(g)).count();
            if c != self.held[g] {
                return Err(format!(
                    "group {g} holds {c} blocks but counts {}",
                    self.held[g]
                ));
            }
        }
        Ok(())
    }
}
