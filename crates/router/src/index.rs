//! What one replica holds in its prefix cache, as its KV events tell: the set of stored
//! block hashes (vLLM's external 64-bit form). A prompt's match is the longest run of its
//! chained block hashes from the first that the set holds (a chain hash names its whole
//! prefix, so a hit at block i implies the prefix up to i).

use std::collections::HashSet;

use pagoda_kv_events::WireEvent;

/// One replica's cached blocks.
#[derive(Debug, Default)]
pub struct BlockIndex {
    blocks: HashSet<u64>,
    /// The block size its events report (0 before the first store).
    pub block_size: usize,
}

impl BlockIndex {
    /// Applies one event.
    pub fn apply(&mut self, e: &WireEvent) {
        match e {
            WireEvent::BlockStored {
                block_hashes,
                block_size,
                ..
            } => {
                self.block_size = *block_size;
                self.blocks.extend(block_hashes.iter().copied());
            }
            WireEvent::BlockRemoved { block_hashes } => {
                for h in block_hashes {
                    self.blocks.remove(h);
                }
            }
            WireEvent::AllBlocksCleared => self.blocks.clear(),
        }
    }

    /// Forgets everything (the replica restarted).
    pub fn clear(&mut self) {
        self.blocks.clear();
    }

    /// Blocks known.
    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    /// Whether no block is known.
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// How many of `hashes` (a prompt's chain, first block first) are cached, from the first.
    pub fn matched(&self, hashes: &[u64]) -> usize {
        hashes
            .iter()
            .take_while(|h| self.blocks.contains(h))
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_match_is_a_prefix_and_removal_and_clear_shorten_it() {
        let mut ix = BlockIndex::default();
        ix.apply(&WireEvent::BlockStored {
            block_hashes: vec![1, 2, 3],
            parent_block_hash: None,
            token_ids: vec![0; 12],
            block_size: 4,
        });
        assert_eq!(ix.matched(&[1, 2, 3, 4]), 3);
        assert_eq!(ix.matched(&[9, 2, 3]), 0);
        ix.apply(&WireEvent::BlockRemoved {
            block_hashes: vec![2],
        });
        assert_eq!(ix.matched(&[1, 2, 3]), 1);
        ix.apply(&WireEvent::AllBlocksCleared);
        assert!(ix.is_empty());
    }
}
