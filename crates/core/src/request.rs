//! A request as the scheduler tracks it: its tokens (prompt, then generated), how many of them
//! have KV in the cache (`num_computed_tokens`, the one invariant the scheduler drives), its
//! block hashes, and where it is in its life.

use std::time::Instant;

use crate::kv::PendingLoad;
use crate::kv::block_hash::{BlockHash, HashChain};
use crate::sampling_params::SamplingParams;
use crate::speculative::Acceptance;
use crate::tenant::Tenant;

/// The engine's key for one sequence (one choice of a request: `n > 1` makes n of them).
pub type SeqId = u64;

/// Where a sequence is in its life.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RequestStatus {
    Waiting,
    Running,
    /// Blocks freed by preemption; waits at the front of the queue to be recomputed.
    Preempted,
    Finished(FinishReason),
}

/// Why a sequence ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// A model end-of-generation id, or one of `stop_token_ids`; carries the id.
    Stop(u32),
    /// `max_tokens` generated, or the context is full.
    Length,
    /// Aborted by the client (or by a stop string found at the text edge).
    Abort,
    /// The request could not run; the message says why.
    Error(String),
}

impl FinishReason {
    /// The OpenAI `finish_reason` spelling.
    pub fn as_openai(&self) -> &'static str {
        match self {
            Self::Stop(_) => "stop",
            Self::Length => "length",
            Self::Abort => "abort",
            Self::Error(_) => "error",
        }
    }
}

/// One sequence in the scheduler.
#[derive(Clone, Debug)]
pub struct Request {
    pub seq_id: SeqId,
    /// Prompt then generated tokens.
    pub token_ids: Vec<u32>,
    pub prompt_len: usize,
    /// Tokens whose KV is in the cache; the scheduler moves this toward `num_tokens()`.
    pub num_computed_tokens: usize,
    pub params: SamplingParams,
    /// Seed of this sequence's sampler (the request's seed, or one the engine drew).
    pub seed: u64,
    /// Lower runs first; ties by arrival.
    pub priority: i32,
    /// Whose request this is, for the fair order (set by the engine after `new`).
    pub tenant: Tenant,
    /// Admission order (monotonic), for FCFS and for picking the latest-arrived victim.
    pub arrival_seq: u64,
    pub arrival: Instant,
    pub status: RequestStatus,
    /// The root and extra keys its block hashes are chained from.
    pub hash_chain: HashChain,
    /// Hashes of every full block of `token_ids`.
    pub block_hashes: Vec<BlockHash>,
    /// Prompt tokens served from the prefix cache at first admission.
    pub num_cached_tokens: Option<usize>,
    pub num_preemptions: u32,
    /// When the sequence was first scheduled.
    pub first_scheduled: Option<Instant>,
    /// How often its proposed tokens were accepted (speculative decoding).
    pub acceptance: Acceptance,
    /// Tokens of it a draft model holds KV for (as the draft last reported): the rest it
    /// must catch up on before it can propose, a cost `auto` weighs before starting.
    pub draft_fed: usize,
    /// Prompt and generated tokens a context shift took out of `token_ids`, so far.
    pub shifted_out: Shifted,
    /// Reached `max_model_len` with context shift on: shifts before its next step.
    pub needs_shift: bool,
    /// Its next blocks are being read from the lower KV tier: it waits until they are in.
    pub loading: Option<PendingLoad>,
    /// The lower tier was asked about this admission already (reset by preemption).
    pub tier_checked: bool,
    /// Waiting for its prompt's blocks from a prefill replica (`KvTransfer::Receive`).
    pub awaiting_transfer: bool,
}

/// Tokens a context shift discarded, by where they came from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Shifted {
    pub prompt: usize,
    pub output: usize,
}

impl Request {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        seq_id: SeqId,
        prompt: Vec<u32>,
        params: SamplingParams,
        seed: u64,
        priority: i32,
        arrival_seq: u64,
        hash_chain: HashChain,
        block_size: usize,
    ) -> Self {
        let mut block_hashes = Vec::new();
        hash_chain.extend(&mut block_hashes, &prompt, block_size);
        Self {
            seq_id,
            prompt_len: prompt.len(),
            token_ids: prompt,
            num_computed_tokens: 0,
            params,
            seed,
            priority,
            tenant: Tenant::default(),
            arrival_seq,
            arrival: Instant::now(),
            status: RequestStatus::Waiting,
            hash_chain,
            block_hashes,
            num_cached_tokens: None,
            num_preemptions: 0,
            first_scheduled: None,
            acceptance: Acceptance::default(),
            draft_fed: 0,
            shifted_out: Shifted::default(),
            needs_shift: false,
            loading: None,
            tier_checked: false,
            awaiting_transfer: false,
        }
    }

    /// The digest of the adapter this sequence runs with, if any.
    pub fn lora_digest(&self) -> Option<u64> {
        self.params.lora.as_ref().map(|l| l.digest())
    }

    pub fn num_tokens(&self) -> usize {
        self.token_ids.len()
    }

    /// Tokens generated so far, those a context shift discarded included.
    pub fn num_output_tokens(&self) -> usize {
        self.token_ids.len() - self.prompt_len + self.shifted_out.output
    }

    /// The prompt's length as it was sent (before any context shift).
    pub fn original_prompt_len(&self) -> usize {
        self.prompt_len + self.shifted_out.prompt
    }

    /// Takes tokens `start..start + n` out of the context (a context shift): later tokens move
    /// `n` positions down, KV included (`n` of the computed tokens go). Block hashes past
    /// `start` no longer describe the blocks, and the sequence stops using the prefix cache.
    pub fn discard(&mut self, start: usize, n: usize, block_size: usize) {
        let from_prompt = self.prompt_len.saturating_sub(start).min(n);
        self.token_ids.drain(start..start + n);
        self.prompt_len -= from_prompt;
        self.shifted_out.prompt += from_prompt;
        self.shifted_out.output += n - from_prompt;
        self.num_computed_tokens = self.num_computed_tokens.saturating_sub(n);
        self.block_hashes.truncate(start / block_size.max(1));
    }

    pub fn output_token_ids(&self) -> &[u32] {
        &self.token_ids[self.prompt_len..]
    }

    pub fn is_finished(&self) -> bool {
        matches!(self.status, RequestStatus::Finished(_))
    }

    /// Appends a generated token and hashes any block it completes.
    pub fn append_token(&mut self, token: u32, block_size: usize) {
        self.token_ids.push(token);
        self.hash_chain
            .extend(&mut self.block_hashes, &self.token_ids, block_size);
    }

    /// How many tokens this sequence may still generate before a length stop: its
    /// `max_tokens` and the context of `max_model_len`.
    pub fn tokens_left(&self, max_model_len: usize) -> usize {
        let by_max = (self.params.max_tokens as usize).saturating_sub(self.num_output_tokens());
        by_max.min(max_model_len.saturating_sub(self.num_tokens()))
    }

    /// Whether this sequence may take blocks from the prefix cache: prompt logprobs need the
    /// logits of every prompt position, which a cache hit would skip.
    /// A shifted sequence's later blocks hold re-rotated KV, close to but not the same bits as a
    /// fresh computation, so they never enter the cache.
    pub fn uses_prefix_cache(&self) -> bool {
        self.params.prompt_logprobs.is_none() && self.shifted_out == Shifted::default()
    }
}
