//! The KV layout digest: everything a block's bytes depend on besides its tokens, hashed, so a
//! block written under one layout (a disk-tier file, a peer's transfer) is never read under
//! another. The disk tier and KV transfer both call `KvCache::layout_digest`.

use pagoda_core::kv::KvGroup;
use sha2::{Digest, Sha256};

use crate::KvCache;

impl KvCache {
    /// SHA-256 of the format's name and version (`"kv-disk"`, `"kv-transfer"`), the model's
    /// identity (each format says what identifies a model), the KV element type, block size,
    /// heads, head size, arena slots (layers per block) and the group layout.
    pub fn layout_digest(
        &self,
        format: &str,
        version: u32,
        model_identity: &str,
        groups: &[KvGroup],
    ) -> [u8; 32] {
        let l = self.layout();
        let text = format!(
            "pagoda {format} v{version}; model {model_identity}; dtype {}; block_size {}; kv_heads {}; head_dim {}; slots {}; groups {groups:?}",
            self.dtype().name(),
            l.block_size,
            l.num_kv_heads,
            l.head_dim,
            self.num_arena_slots(),
        );
        Sha256::digest(text.as_bytes()).into()
    }
}
