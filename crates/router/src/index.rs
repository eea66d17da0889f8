//! What one replica holds in its prefix cache, as its KV events tell: the set of stored
//! block hashes (vLLM's external 64-bit form). A prompt's match is the longest run of its
//! chained block hashes from the first that the set holds (a chain hash names its whole
//! prefix, so a hit at block i implies the prefix up to i). Blocks of a prompt just routed to
//! the replica count as held for a short while before its events confirm them (as Dynamo's
//! router predicts), so requests that share a prefix and arrive together go to one replica.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use pagoda_kv_events::WireEvent;

/// One replica's cached blocks.
#[derive(Debug, Default)]
pub struct BlockIndex {
    blocks: HashSet<u64>,
    /// Blocks of prompts routed here, not yet confirmed by a `BlockStored`, and when.
    predicted: HashMap<u64, Instant>,
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
                for h in block_hashes {
                    self.predicted.remove(h);
                    self.blocks.insert(*h);
                }
            }
            WireEvent::BlockRemoved { block_hashes } => {
                for h in block_hashes {
                    self.blocks.remove(h);
                    self.predicted.remove(h);
                }
            }
            WireEvent::AllBlocksCleared => self.clear(),
        }
    }

    /// Forgets everything (the replica restarted).
    pub fn clear(&mut self) {
        self.blocks.clear();
        self.predicted.clear();
    }

    /// Counts `hashes` as held until `now + PREDICTION_TTL` unless an event confirms them.
    pub fn predict(&mut self, hashes: &[u64], now: Instant) {
        if self.predicted.len() > 4 * hashes.len() + 4096 {
            self.predicted
                .retain(|_, t| now.duration_since(*t) < PREDICTION_TTL);
        }
        for h in hashes {
            if !self.blocks.contains(h) {
                self.predicted.insert(*h, now);
            }
        }
    }

    /// Blocks known.
    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    /// Whether no block is known.
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// How many of `hashes` (a prompt's chain, first block first) are cached or predicted,
    /// from the first.
    pub fn matched(&self, hashes: &[u64], now: Instant) -> usize {
        hashes
            .iter()
            .take_while(|h| {
                self.blocks.contains(h)
                    || self
                        .predicted
                        .get(h)
                        .is_some_and(|t| now.duration_since(*t) < PREDICTION_TTL)
            })
            .count()
    }
}

/// How long a routed prompt's blocks count as held without a `BlockStored`: long enough for a
/// long prefill under load, short enough that a request that failed is soon forgotten.
pub const PREDICTION_TTL: Duration = Duration::from_secs(30);

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
        let now = Instant::now();
        assert_eq!(ix.matched(&[1, 2, 3, 4], now), 3);
        assert_eq!(ix.matched(&[9, 2, 3], now), 0);
        ix.apply(&WireEvent::BlockRemoved {
            block_hashes: vec![2],
        });
        assert_eq!(ix.matched(&[1, 2, 3], now), 1);
        // A prediction counts until it expires.
        ix.predict(&[2, 3, 4], now);
        assert_eq!(ix.matched(&[1, 2, 3, 4], now), 4);
        assert_eq!(ix.matched(&[1, 2, 3, 4], now + PREDICTION_TTL), 1);
        ix.apply(&WireEvent::AllBlocksCleared);
        assert!(ix.is_empty());
        assert_eq!(ix.matched(&[2], now), 0);
    }
}
