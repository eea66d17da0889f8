//! KV block accounting: which blocks of the executor's arena hold which sequence's tokens.

pub mod block_hash;
pub mod block_pool;
mod canonical_cbor;
pub mod kv_cache_manager;
pub mod kv_events;
pub mod kv_group;
pub mod kv_tier;

pub use block_hash::{BlockHash, ExtraKeys};
pub use block_pool::{BlockId, BlockPool};
pub use kv_cache_manager::{ComputedBlocks, KvCacheManager, PrefixCacheStats};
pub use kv_events::{KvEvent, KvEventLog};
pub use kv_group::{KvGroup, NULL_BLOCK};
pub use kv_tier::{KvLoad, KvTier, KvTierStats, LoadTicket, PendingLoad};
