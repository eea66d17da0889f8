//! What the scheduler tells the executor each step, as a diff: a sequence's full payload the
//! first time it is scheduled, then only its new blocks and token counts. The executor keeps
//! each sequence's tokens and sampler until the sequence appears in `finished_seq_ids`.

use crate::kv::block_hash::BlockHash;
use crate::kv::{BlockId, KvLoad, KvSend};
use crate::request::SeqId;
use crate::sampling_params::SamplingParams;

/// The first scheduling of a sequence.
#[derive(Clone, Debug, PartialEq)]
pub struct NewSeqData {
    pub prompt_token_ids: Vec<u32>,
    pub params: SamplingParams,
    /// Seed of the sequence's sampler.
    pub seed: u64,
}

/// A context shift the executor applies to a sequence before the step's forward pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContextShift {
    /// Tokens `keep..keep + discard` left the context; later ones are `discard` positions lower.
    pub keep: usize,
    pub discard: usize,
    /// Blocks whose KV moves, `(from, to)`, keys re-rotated by `-discard` positions. Empty when
    /// the sequence is recomputed instead (preempted, or the pool had no blocks to copy into).
    pub copies: Vec<(BlockId, BlockId)>,
}

/// One sequence's share of a step.
#[derive(Clone, Debug, PartialEq)]
pub struct ScheduledSeq {
    pub seq_id: SeqId,
    /// Present the first time the sequence is scheduled.
    pub new: Option<NewSeqData>,
    /// Scheduled again after preemption: `block_ids` replaces its whole block tables.
    pub resumed: bool,
    /// Per KV group, the entries to put in the sequence's table from index `table_offset` on
    /// (the tables are cut there first: blocks that held rejected speculative tokens were given
    /// back). `NULL_BLOCK` marks an entry a sliding window no longer reaches; entries the
    /// executor holds from earlier steps may have been given back the same way (the kernels
    /// never read blocks outside the window, so the executor need not be told).
    pub block_ids: Vec<Vec<BlockId>>,
    /// Where `block_ids` start in the tables (0 when new or resumed).
    pub table_offset: usize,
    /// Tokens with KV before this step.
    pub num_computed_tokens: usize,
    /// Tokens to compute this step, from `num_computed_tokens` on, including the
    /// `num_spec_tokens` speculative ones at the end.
    pub num_scheduled_tokens: usize,
    /// Slots for tokens the executor proposes after the known ones and verifies in the same
    /// pass (at most this many; 0 without speculation).
    pub num_spec_tokens: usize,
    /// A context shift since the sequence last ran, applied before `block_ids` (which then
    /// hold its whole table, `table_offset` 0).
    pub shift: Option<ContextShift>,
}

/// One step's work.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SchedulerOutput {
    pub scheduled: Vec<ScheduledSeq>,
    pub total_num_scheduled_tokens: usize,
    /// Sequences that ended since the last step: the executor drops their state.
    pub finished_seq_ids: Vec<SeqId>,
    /// Sequences preempted this step (their KV is gone; they come back with `resumed`).
    pub preempted_seq_ids: Vec<SeqId>,
    /// Cached blocks evicted this step that the lower KV tier lacks, `(block, group key)`: the
    /// executor copies their bytes out first, before anything this step writes.
    pub kv_saves: Vec<(BlockId, BlockHash)>,
    /// Blocks read back from the lower tier: written into their blocks after `kv_saves` and
    /// before the forward pass (they are cached blocks from this step on).
    pub kv_loads: Vec<KvLoad>,
    /// Prompt blocks of finished prefill-role requests to ship to decode replicas: the
    /// executor copies their bytes out before this step's forward pass (the scheduler
    /// released them when it planned the step; nothing reuses them before the pass).
    pub kv_sends: Vec<KvSend>,
}

impl SchedulerOutput {
    pub fn is_empty(&self) -> bool {
        self.scheduled.is_empty()
    }

    /// Whether the executor has anything to do: a forward pass or tier copies.
    pub fn has_work(&self) -> bool {
        !self.scheduled.is_empty()
            || !self.kv_saves.is_empty()
            || !self.kv_loads.is_empty()
            || !self.kv_sends.is_empty()
    }
}
