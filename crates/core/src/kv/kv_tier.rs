//! A lower tier of the prefix cache (the disk store of `pagoda-model`), as the scheduler sees
//! it: an index it can ask "is this block there?", a background read it starts and polls, and a
//! cost model saying whether reading beats recomputing. Blocks evicted from the pool leave as
//! `SchedulerOutput::kv_saves` (the executor copies their bytes out before the step overwrites
//! them); blocks read back come in as `SchedulerOutput::kv_loads` and become ordinary cached
//! blocks of the pool. The tier is an I/O service beside the engine, like the KV events
//! publisher: it is shared with the executor, never holds engine state.

use super::block_hash::BlockHash;
use super::block_pool::BlockId;

/// A background read the scheduler started for one waiting sequence.
pub type LoadTicket = u64;

/// The lower tier's half of the scheduler's interface. Every call is cheap (an in-memory
/// index, a channel send, a map lookup): the engine thread never waits on I/O.
pub trait KvTier: Send + Sync + std::fmt::Debug {
    /// Whether the tier is on (a full disk turns it off while serving goes on).
    fn enabled(&self) -> bool;

    /// Whether a block with group key `key` can be read back.
    fn contains(&self, key: &BlockHash) -> bool;

    /// Whether reading `blocks` blocks is expected to take less time than computing `tokens`
    /// prompt tokens.
    fn worth_reading(&self, blocks: usize, tokens: usize) -> bool;

    /// Starts reading `keys` (in order) on the tier's reader thread.
    fn prefetch(&self, keys: Vec<BlockHash>) -> LoadTicket;

    /// `None` while the read of `ticket` runs; then how many of its keys, from the first on,
    /// were read intact (their bytes wait in the tier until the executor installs them).
    fn poll(&self, ticket: LoadTicket) -> Option<usize>;

    /// Forgets `ticket` and whatever it read (its sequence ended or got no blocks).
    fn cancel(&self, ticket: LoadTicket);

    /// Counters for metrics.
    fn stats(&self) -> KvTierStats;

    /// Counts a prefix lookup past the memory cache: `hit` blocks found in the tier, `miss`
    /// blocks not (or not worth reading).
    fn record_lookup(&self, hit: usize, miss: usize);

    /// Whether blocks of transfer `id` (prefill/decode disaggregation) are still expected:
    /// the sequence waits meanwhile. False once they arrived, failed or timed out; always
    /// false for a tier that is not fed by transfers.
    fn awaiting(&self, _id: &str) -> bool {
        false
    }

    /// Whether evicted blocks are saved to this tier (false: a store fed only from outside,
    /// such as received transfers, so nothing is copied out on eviction).
    fn takes_saves(&self) -> bool {
        true
    }
}

/// A block read back from the tier, to be written into `block_id` before the step's forward.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvLoad {
    pub block_id: BlockId,
    /// The block's group key (its file in the tier).
    pub key: BlockHash,
    /// The read that fetched it.
    pub ticket: LoadTicket,
}

/// A waiting sequence whose next blocks are being read from the tier: it is skipped by the
/// scheduler (never stalling the others) until the read finishes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingLoad {
    pub ticket: LoadTicket,
    /// Index of the first block read (the memory hit's length when the read started).
    pub first_block: usize,
    /// Blocks read (each of them in every KV group).
    pub num_blocks: usize,
}

/// Counters of a lower KV tier (blocks, bytes), for `/metrics`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KvTierStats {
    pub enabled: bool,
    /// Blocks found in the tier by prefix lookups that missed in memory, and not found.
    pub hits: u64,
    pub misses: u64,
    pub blocks_written: u64,
    pub blocks_read: u64,
    /// Writes dropped because the writer's queue was full (or the tier turned off).
    pub blocks_dropped: u64,
    pub bytes_written: u64,
    pub bytes_read: u64,
    /// Blocks and bytes held on disk now.
    pub blocks_stored: u64,
    pub bytes_stored: u64,
}
