//! KV cache groups: layers that attend the same way (full attention, or a sliding window of W
//! tokens) share one block table per sequence. A sliding group only needs the blocks its next
//! query can see, so blocks that slid out of the window go back to the pool while it runs.

use super::block_hash::BlockHash;
use super::block_pool::BlockId;

/// A table entry whose block was given back (it lies wholly before the group's window).
pub const NULL_BLOCK: BlockId = BlockId::MAX;

/// How the layers of one group attend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KvGroup {
    /// `Some(W)`: a query at position `p` sees keys `p' > p - W` only.
    pub sliding_window: Option<usize>,
}

impl KvGroup {
    pub const FULL: Self = Self {
        sliding_window: None,
    };

    pub fn sliding(window: usize) -> Self {
        Self {
            sliding_window: Some(window.max(1)),
        }
    }

    /// Index of the first block a query at position `pos` (or any later one) reads.
    pub fn first_needed_block(&self, pos: usize, block_size: usize) -> usize {
        match self.sliding_window {
            None => 0,
            Some(w) => (pos + 1).saturating_sub(w) / block_size,
        }
    }

    /// Most blocks a sequence of this group holds between steps once its window slid: the
    /// window's keys plus the block the next token goes to (`None` for full attention).
    pub fn max_held_blocks(&self, block_size: usize) -> Option<usize> {
        self.sliding_window
            .map(|w| (w - 1).div_ceil(block_size) + 1)
    }
}

/// The prefix-cache key of a block of group `group`: group 0 uses the block hash itself; the
/// others mix in their index so two groups' copies of the same tokens never collide.
pub fn group_key(hash: BlockHash, group: usize) -> BlockHash {
    // An odd 128-bit constant: distinct groups get distinct, well-spread offsets, mixed into
    // the first 16 bytes (which the pool's map hashes) and so into the whole key.
    const MIX: u128 = 0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835;
    let mut out = hash.0;
    let mixed = u128::from_le_bytes(out[..16].try_into().unwrap_or([0; 16]))
        ^ (group as u128).wrapping_mul(MIX);
    out[..16].copy_from_slice(&mixed.to_le_bytes());
    BlockHash(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_decides_the_first_needed_block() {
        let g = KvGroup::sliding(512);
        // A query at 511 sees key 0; at 512 it no longer does; block 0 ends at 15.
        assert_eq!(g.first_needed_block(511, 16), 0);
        assert_eq!(g.first_needed_block(527, 16), 1);
        assert_eq!(g.first_needed_block(526, 16), 0);
        assert_eq!(KvGroup::FULL.first_needed_block(100_000, 16), 0);
        // 511 older keys span at most 33 blocks with the current one; the next token's block
        // may be one more only when it starts a block, which the 511 keys then do not fill.
        assert_eq!(g.max_held_blocks(16), Some(33));
        assert_ne!(
            group_key(BlockHash([5; 32]), 1),
            group_key(BlockHash([5; 32]), 2)
        );
        assert_eq!(group_key(BlockHash([5; 32]), 0), BlockHash([5; 32]));
    }
}
