//! Engine-wide counters and gauges (`EngineStats`) read by `/metrics`: queue sizes, KV use
//! per group, token counts, prefix-cache hits, speculation and the disk tier.

use crate::kv::KvTierStats;
use crate::speculative::SpecCounters;

/// Engine-wide counters and gauges, for metrics.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EngineStats {
    pub num_running: usize,
    pub num_waiting: usize,
    pub kv_usage: f64,
    pub num_blocks: usize,
    /// Blocks held per KV group (full attention or a sliding window), in group order.
    pub kv_groups: Vec<KvGroupUsage>,
    pub prompt_tokens: u64,
    pub generation_tokens: u64,
    pub prefix_queried_tokens: u64,
    pub prefix_hit_tokens: u64,
    pub preemptions: u64,
    /// Sequences that reached `max_model_len` and went on after a context shift.
    pub context_shifts: u64,
    pub steps: u64,
    /// At the last step with the most KV slots allocated: slots allocated and slots holding a
    /// token (the rest is partial-block waste).
    pub peak_kv_slots: usize,
    pub peak_kv_filled: usize,
    /// Speculative decoding, when on.
    pub spec: Option<SpecCounters>,
    /// Names of the distinct LoRA adapters of running and of waiting sequences.
    pub running_loras: Vec<std::sync::Arc<str>>,
    pub waiting_loras: Vec<std::sync::Arc<str>>,
    /// The disk tier of the prefix cache, when one is attached.
    pub kv_tier: Option<KvTierStats>,
}

/// One KV group's share of the pool.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KvGroupUsage {
    /// `None` for full attention.
    pub sliding_window: Option<usize>,
    /// Blocks owned by some sequence.
    pub blocks: usize,
}
