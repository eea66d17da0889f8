//! KV storage: the paged `KvCache` arenas and their group plan, block shifts for context
//! shifting, and the lower tiers a block's bytes move to (the disk tier, another replica).

pub mod cache;
pub mod disk;
pub mod groups;
mod layout;
pub(crate) mod shift;
pub(crate) mod tier_bytes;
pub mod transfer;
