//! The pinned prefix-cache block hash, on its own so that both the engine (`pagoda-core`) and
//! programs that only recompute hashes from token ids (`pagoda-router`) use the one definition
//! without the engine. See docs/scale-out.md for the byte-level format.

mod block_hash;
mod canonical_cbor;

pub use block_hash::{BlockHash, DEFAULT_HASH_SEED, ExtraKeys, HashChain, hash_block, root_hash};
