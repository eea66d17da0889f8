//! What the runner keeps per sequence across steps (`SeqState`) and where a sequence's rows
//! land in one step's logits (`RowPlan`), shared by the step loop and the sampling of its rows.

use std::sync::Arc;

use pagoda_core::SeqId;

use crate::lora::LoraAdapter;
use crate::sampler::Sampler;

/// One sequence as the runner keeps it across steps (the scheduler sends only diffs).
pub(super) struct SeqState {
    /// Prompt, then every token sampled so far.
    pub(super) tokens: Vec<u32>,
    pub(super) prompt_len: usize,
    /// One table per KV group.
    pub(super) block_tables: Vec<Vec<u32>>,
    pub(super) sampler: Sampler,
    pub(super) prompt_logprobs: Option<u32>,
    /// Why this sequence cannot run (reported once, then it is never batched).
    pub(super) failed: Option<String>,
    /// The adapter it runs with (held here, so unloading it elsewhere lets this one finish).
    pub(super) lora: Option<Arc<LoraAdapter>>,
}

/// Where one sequence's rows landed in the step's logits.
pub(super) struct RowPlan {
    pub(super) seq_id: SeqId,
    /// First logits row of this sequence.
    pub(super) first_row: usize,
    /// Prompt-logprob rows (positions `pl_start..pl_start + pl_rows`).
    pub(super) pl_start: usize,
    pub(super) pl_rows: usize,
    /// Tokens scheduled for this sequence in this step.
    pub(super) num_rows: usize,
    /// Whether the last row samples a token.
    pub(super) samples: bool,
    /// Proposed tokens appended to the chunk; the last `drafts.len() + 1` rows verify them.
    pub(super) drafts: Vec<u32>,
    /// The draft model's distribution behind each proposal, when it sampled them (else empty).
    pub(super) draft_probs: Vec<Vec<f32>>,
}
