//! What the prefix cache gained and lost, recorded as the pool changes and taken once per step:
//! the engine side of KV cache events (vLLM's `BlockStored`, `BlockRemoved`,
//! `AllBlocksCleared`). A mirror of the published set lets a resync describe every cached block.

use std::collections::HashMap;

use super::block_hash::BlockHash;

/// One change to the set of cached blocks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KvEvent {
    /// Consecutive full blocks of one sequence, now cached.
    BlockStored {
        block_hashes: Vec<BlockHash>,
        /// The block before the first one (`None`: the first is a sequence's first block).
        parent_block_hash: Option<BlockHash>,
        /// `block_size` tokens per stored block, in order.
        token_ids: Vec<u32>,
        block_size: usize,
        lora_id: Option<u64>,
    },
    /// Blocks evicted from the cache.
    BlockRemoved { block_hashes: Vec<BlockHash> },
    /// Every cached block is gone.
    AllBlocksCleared,
}

#[derive(Clone, Debug)]
struct Stored {
    parent: Option<BlockHash>,
    tokens: Vec<u32>,
    lora_id: Option<u64>,
}

/// The pending events of the current step and the set they add up to.
#[derive(Debug, Default)]
pub struct KvEventLog {
    pending: Vec<KvEvent>,
    live: HashMap<BlockHash, Stored>,
    block_size: usize,
}

impl KvEventLog {
    pub fn new(block_size: usize) -> Self {
        Self {
            block_size,
            ..Self::default()
        }
    }

    /// `hashes` (consecutive, after `parent`) were registered with `tokens`.
    pub fn stored(
        &mut self,
        hashes: &[BlockHash],
        parent: Option<BlockHash>,
        tokens: &[u32],
        lora_id: Option<u64>,
    ) {
        if hashes.is_empty() {
            return;
        }
        let bs = self.block_size;
        let mut prev = parent;
        for (i, &h) in hashes.iter().enumerate() {
            self.live.insert(
                h,
                Stored {
                    parent: prev,
                    tokens: tokens[i * bs..(i + 1) * bs].to_vec(),
                    lora_id,
                },
            );
            prev = Some(h);
        }
        self.pending.push(KvEvent::BlockStored {
            block_hashes: hashes.to_vec(),
            parent_block_hash: parent,
            token_ids: tokens.to_vec(),
            block_size: bs,
            lora_id,
        });
    }

    /// `hash` was evicted; removals of one step merge into one event.
    pub fn removed(&mut self, hash: BlockHash) {
        // Only what was published is withdrawn: blocks of other KV groups are cached under
        // mixed keys that no subscriber ever saw.
        if self.live.remove(&hash).is_none() {
            return;
        }
        if let Some(KvEvent::BlockRemoved { block_hashes }) = self.pending.last_mut() {
            block_hashes.push(hash);
        } else {
            self.pending.push(KvEvent::BlockRemoved {
                block_hashes: vec![hash],
            });
        }
    }

    pub fn cleared(&mut self) {
        self.live.clear();
        self.pending.push(KvEvent::AllBlocksCleared);
    }

    /// The events since the last call.
    pub fn take(&mut self) -> Vec<KvEvent> {
        std::mem::take(&mut self.pending)
    }

    /// What a subscriber that lost events needs: `AllBlocksCleared`, then every cached block
    /// (each its own `BlockStored`, parents before children). Drops the pending events, which
    /// this supersedes.
    pub fn resync(&mut self) -> Vec<KvEvent> {
        self.pending.clear();
        let mut out = vec![KvEvent::AllBlocksCleared];
        let mut emitted: std::collections::HashSet<BlockHash> = Default::default();
        let mut hashes: Vec<BlockHash> = self.live.keys().copied().collect();
        hashes.sort();
        for h in hashes {
            self.emit_chain(h, &mut emitted, &mut out);
        }
        out
    }

    /// Emits `h` after its cached ancestors (iteratively: chains can be thousands long).
    fn emit_chain(
        &self,
        h: BlockHash,
        emitted: &mut std::collections::HashSet<BlockHash>,
        out: &mut Vec<KvEvent>,
    ) {
        let mut chain = Vec::new();
        let mut cur = Some(h);
        while let Some(c) = cur {
            if emitted.contains(&c) {
                break;
            }
            let Some(s) = self.live.get(&c) else { break };
            chain.push(c);
            cur = s.parent;
        }
        for c in chain.into_iter().rev() {
            let Some(s) = self.live.get(&c) else { continue };
            emitted.insert(c);
            out.push(KvEvent::BlockStored {
                block_hashes: vec![c],
                parent_block_hash: s.parent,
                token_ids: s.tokens.clone(),
                block_size: self.block_size,
                lora_id: s.lora_id,
            });
        }
    }

    /// The hashes the published events add up to (tests compare it with the pool).
    pub fn live_hashes(&self) -> impl Iterator<Item = &BlockHash> {
        self.live.keys()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resync_lists_parents_first_and_replaces_pending() {
        let h = |b: u8| BlockHash([b; 32]);
        let mut log = KvEventLog::new(2);
        log.stored(&[h(1), h(2)], None, &[1, 2, 3, 4], None);
        log.stored(&[h(3)], Some(h(2)), &[5, 6], None);
        log.removed(h(1));
        log.removed(h(9));
        assert_eq!(log.take().len(), 3, "two stored, one merged removal");
        let r = log.resync();
        assert_eq!(r[0], KvEvent::AllBlocksCleared);
        let order: Vec<BlockHash> = r[1..]
            .iter()
            .map(|e| match e {
                KvEvent::BlockStored { block_hashes, .. } => block_hashes[0],
                _ => panic!("only stores after the clear"),
            })
            .collect();
        assert_eq!(order, [h(2), h(3)]);
        assert!(log.take().is_empty());
    }
}
