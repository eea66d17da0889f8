//! The block accounting of prefill/decode disaggregation on the prefill side: a finished
//! request's full prompt blocks are held (one extra owner each) past its end, so the
//! executor can copy their bytes out for the decode replica before anything reuses them,
//! then released like any other owner.

use super::KvCacheManager;
use crate::kv::block_hash::BlockHash;
use crate::kv::kv_group::group_key;
use crate::kv::{BlockId, NULL_BLOCK};
use crate::request::Request;

impl KvCacheManager {
    /// Takes one more owner of every full, computed prompt block of `req` in every KV group
    /// (a sliding group's given-back entries are skipped) and returns them as
    /// `(block, group key)`, block-major. Call before `free(req)`.
    pub fn hold_prompt_blocks(&mut self, req: &Request) -> Vec<(BlockId, BlockHash)> {
        let Some(tables) = self.tables.get(&req.seq_id) else {
            return Vec::new();
        };
        let full = (req.prompt_len.min(req.num_computed_tokens) / self.block_size)
            .min(req.block_hashes.len());
        let mut out = Vec::new();
        for (j, &h) in req.block_hashes.iter().enumerate().take(full) {
            for (g, t) in tables.iter().enumerate() {
                match t.get(j) {
                    Some(&b) if b != NULL_BLOCK => out.push((b, group_key(h, g))),
                    _ => {}
                }
            }
        }
        let ids: Vec<BlockId> = out.iter().map(|&(b, _)| b).collect();
        self.pool.touch(&ids);
        out
    }

    /// Drops the owner `hold_prompt_blocks` took.
    pub fn release_held(&mut self, blocks: &[(BlockId, BlockHash)]) {
        self.release(blocks.iter().map(|&(b, _)| b));
    }
}
