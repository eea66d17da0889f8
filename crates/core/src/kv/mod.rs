//! KV block accounting: which blocks of the executor's arena hold which sequence's tokens.

pub mod block_pool;
pub mod kv_cache_manager;
pub mod kv_events;
pub mod kv_group;
pub mod kv_tier;
pub mod kv_transfer;

pub use block_pool::{BlockId, BlockPool};
pub use kv_cache_manager::{ComputedBlocks, KvCacheManager, PrefixCacheStats};
pub use kv_events::{KvEvent, KvEventLog};
pub use kv_group::{KvGroup, NULL_BLOCK};
pub use kv_tier::{KvLoad, KvTier, KvTierStats, LoadTicket, PendingLoad};
pub use kv_transfer::{KvRole, KvSend, KvTransfer};
/// The pinned block hash lives in its own crate (the router recomputes it without the engine);
/// `kv::block_hash` keeps the paths the engine and its tests use.
pub use pagoda_block_hash as block_hash;
pub use pagoda_block_hash::{BlockHash, ExtraKeys};
