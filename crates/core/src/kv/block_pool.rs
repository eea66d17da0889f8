//! The pool of KV blocks: a flat `Vec` with an intrusive doubly-linked free queue, and the map
//! from block hash to cached block. A freed block keeps its hash (lazy eviction) until the pool
//! hands it out again, so a later request with the same prefix can take it back in O(1).

use std::collections::HashMap;

use super::block_hash::BlockHash;
use super::kv_events::KvEventLog;

/// Index of a block in the KV arena.
pub type BlockId = u32;

const NIL: u32 = u32::MAX;

#[derive(Clone, Debug)]
struct Block {
    ref_cnt: u32,
    /// Set once the block is full and registered in the cache map.
    hash: Option<BlockHash>,
    prev_free: u32,
    next_free: u32,
}

/// Fixed set of blocks, sized once.
#[derive(Debug)]
pub struct BlockPool {
    blocks: Vec<Block>,
    /// Free queue: eviction takes from the head; freed blocks join at the tail.
    free_head: u32,
    free_tail: u32,
    num_free: usize,
    cached: HashMap<BlockHash, BlockId>,
    /// Changes to `cached`, recorded only when KV events are on.
    events: Option<KvEventLog>,
    /// Cached blocks handed out again since the last `take_evictions` (block, hash), recorded
    /// only when a lower KV tier wants them.
    evictions: Option<Vec<(BlockId, BlockHash)>>,
}

impl BlockPool {
    /// A pool of `num_blocks` free blocks, queued in id order.
    pub fn new(num_blocks: usize) -> Self {
        assert!(num_blocks < NIL as usize, "block ids are u32");
        let mut pool = Self {
            blocks: vec![
                Block {
                    ref_cnt: 0,
                    hash: None,
                    prev_free: NIL,
                    next_free: NIL,
                };
                num_blocks
            ],
            free_head: NIL,
            free_tail: NIL,
            num_free: 0,
            cached: HashMap::new(),
            events: None,
            evictions: None,
        };
        for id in 0..num_blocks as u32 {
            pool.push_free(id);
        }
        pool
    }

    pub fn num_blocks(&self) -> usize {
        self.blocks.len()
    }

    /// Blocks with no owner (some may still hold a cached prefix).
    pub fn num_free(&self) -> usize {
        self.num_free
    }

    /// Blocks with at least one owner.
    pub fn num_used(&self) -> usize {
        self.blocks.len() - self.num_free
    }

    pub fn ref_cnt(&self, id: BlockId) -> u32 {
        self.blocks[id as usize].ref_cnt
    }

    pub fn hash_of(&self, id: BlockId) -> Option<BlockHash> {
        self.blocks[id as usize].hash
    }

    /// The cached block holding `hash`, if any.
    pub fn lookup(&self, hash: BlockHash) -> Option<BlockId> {
        self.cached.get(&hash).copied()
    }

    /// Number of blocks `touch(ids)` would take out of the free queue.
    pub fn count_free(&self, ids: &[BlockId]) -> usize {
        ids.iter()
            .filter(|&&id| self.blocks[id as usize].ref_cnt == 0)
            .count()
    }

    /// Takes `n` blocks from the head of the free queue, evicting whatever prefix they cached;
    /// `None` (and no change) when fewer than `n` are free.
    pub fn allocate(&mut self, n: usize) -> Option<Vec<BlockId>> {
        if n > self.num_free {
            return None;
        }
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let id = self.free_head;
            debug_assert_ne!(id, NIL);
            self.unlink_free(id);
            if let Some(h) = self.blocks[id as usize].hash.take()
                && self.cached.get(&h) == Some(&id)
            {
                self.cached.remove(&h);
                if let Some(log) = &mut self.events {
                    log.removed(h);
                }
                if let Some(ev) = &mut self.evictions {
                    ev.push((id, h));
                }
            }
            self.blocks[id as usize].ref_cnt = 1;
            out.push(id);
        }
        Some(out)
    }

    /// Adds an owner to each of `ids` (cache hits), taking free ones out of the free queue.
    pub fn touch(&mut self, ids: &[BlockId]) {
        for &id in ids {
            if self.blocks[id as usize].ref_cnt == 0 {
                self.unlink_free(id);
            }
            self.blocks[id as usize].ref_cnt += 1;
        }
    }

    /// Drops one owner of each of `ids`, in order; blocks left with none join the free queue's
    /// tail (so pass a request's blocks tail first: its last blocks are then evicted first).
    pub fn free(&mut self, ids: impl IntoIterator<Item = BlockId>) {
        for id in ids {
            let b = &mut self.blocks[id as usize];
            debug_assert!(b.ref_cnt > 0, "block {id} freed twice");
            if b.ref_cnt == 0 {
                continue;
            }
            b.ref_cnt -= 1;
            if b.ref_cnt == 0 {
                self.push_free(id);
            }
        }
    }

    /// Registers full block `id` as holding `hash`. If another block already holds it (two
    /// requests computed the same prefix at once), the first stays the cached one. True when
    /// `hash` is newly cached.
    pub fn cache(&mut self, id: BlockId, hash: BlockHash) -> bool {
        if self.blocks[id as usize].hash.is_some() {
            return false;
        }
        if let std::collections::hash_map::Entry::Vacant(e) = self.cached.entry(hash) {
            e.insert(id);
            self.blocks[id as usize].hash = Some(hash);
            return true;
        }
        false
    }

    /// Starts recording KV events (`block_size` tokens per block).
    pub fn enable_events(&mut self, block_size: usize) {
        self.events = Some(KvEventLog::new(block_size));
    }

    /// Starts recording evictions of cached blocks (for a lower KV tier).
    pub fn record_evictions(&mut self) {
        self.evictions.get_or_insert_with(Vec::new);
    }

    /// Cached blocks evicted since the last call, in eviction order (their bytes are still in
    /// the arena until the step that reuses them runs).
    pub fn take_evictions(&mut self) -> Vec<(BlockId, BlockHash)> {
        self.evictions
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Whether KV events are recorded.
    pub fn events_on(&self) -> bool {
        self.events.is_some()
    }

    /// The event log, when events are on.
    pub fn events_mut(&mut self) -> Option<&mut KvEventLog> {
        self.events.as_mut()
    }

    /// Every hash in the cache now (what KV events must add up to).
    pub fn cached_hashes(&self) -> impl Iterator<Item = &BlockHash> {
        self.cached.keys()
    }

    /// Drops every cached hash (e.g. after weights change); owners keep their blocks.
    pub fn reset_cache(&mut self) {
        self.cached.clear();
        if let Some(log) = &mut self.events {
            log.cleared();
        }
        for b in &mut self.blocks {
            b.hash = None;
        }
    }

    /// Free-queue order, head first (tests and invariant checks).
    pub fn free_queue(&self) -> Vec<BlockId> {
        let mut out = Vec::with_capacity(self.num_free);
        let mut id = self.free_head;
        while id != NIL {
            out.push(id);
            id = self.blocks[id as usize].next_free;
        }
        out
    }

    fn push_free(&mut self, id: BlockId) {
        let tail = self.free_tail;
        {
            let b = &mut self.blocks[id as usize];
            b.prev_free = tail;
            b.next_free = NIL;
        }
        if tail == NIL {
            self.free_head = id;
        } else {
            self.blocks[tail as usize].next_free = id;
        }
        self.free_tail = id;
        self.num_free += 1;
    }

    fn unlink_free(&mut self, id: BlockId) {
        let (prev, next) = {
            let b = &self.blocks[id as usize];
            (b.prev_free, b.next_free)
        };
        if prev == NIL {
            self.free_head = next;
        } else {
            self.blocks[prev as usize].next_free = next;
        }
        if next == NIL {
            self.free_tail = prev;
        } else {
            self.blocks[next as usize].prev_free = prev;
        }
        let b = &mut self.blocks[id as usize];
        b.prev_free = NIL;
        b.next_free = NIL;
        self.num_free -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocate_free_and_evict_in_queue_order() {
        let mut p = BlockPool::new(4);
        let a = p.allocate(2).unwrap_or_default();
        assert_eq!(a, vec![0, 1]);
        assert_eq!(p.free_queue(), vec![2, 3]);
        p.cache(0, BlockHash([7; 32]));
        // Freed tail first: block 1 then 0 join the tail.
        p.free(a.iter().rev().copied());
        assert_eq!(p.free_queue(), vec![2, 3, 1, 0]);
        assert_eq!(p.lookup(BlockHash([7; 32])), Some(0));
        // A hit takes block 0 out of the middle of the queue, keeping its hash.
        p.touch(&[0]);
        assert_eq!(p.free_queue(), vec![2, 3, 1]);
        assert_eq!(p.ref_cnt(0), 1);
        p.free([0]);
        // Allocating all four evicts block 0's hash when it is handed out.
        assert!(p.allocate(5).is_none());
        assert_eq!(p.allocate(4), Some(vec![2, 3, 1, 0]));
        assert_eq!(p.lookup(BlockHash([7; 32])), None);
        assert_eq!(p.num_free(), 0);
    }

    #[test]
    fn shared_blocks_return_to_the_queue_with_their_last_owner() {
        let mut p = BlockPool::new(2);
        let a = p.allocate(1).unwrap_or_default();
        p.touch(&a);
        assert_eq!(p.ref_cnt(a[0]), 2);
        p.free(a.clone());
        assert_eq!(p.num_free(), 1);
        p.free(a);
        assert_eq!(p.num_free(), 2);
    }

    #[test]
    fn first_cached_copy_wins() {
        let mut p = BlockPool::new(2);
        let ids = p.allocate(2).unwrap_or_default();
        p.cache(ids[0], BlockHash([1; 32]));
        p.cache(ids[1], BlockHash([1; 32]));
        assert_eq!(p.lookup(BlockHash([1; 32])), Some(ids[0]));
        assert_eq!(p.hash_of(ids[1]), None);
    }
}
