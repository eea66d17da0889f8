//! A single-request generation driver for `pagoda generate` and tests (not the scheduler): a
//! trivial block allocator (the request owns blocks `0..n` of the executor's arena), chunked
//! prefill, then one token per step until `max_tokens` or a stop id.

use std::time::{Duration, Instant};

use pagoda_core::SamplingParams;

use crate::batch::{Logits, SeqChunk};
use crate::sampler::{Sampled, Sampler};
use crate::{CpuExecutor, ForwardBatch, ModelError};

/// Options of one generation.
#[derive(Clone, Debug)]
pub struct GenerateOptions {
    pub params: SamplingParams,
    /// Prompt tokens per prefill step; `None` runs the whole prompt in one step.
    pub prefill_chunk: Option<usize>,
    /// Seed used when `params.seed` is `None`.
    pub default_seed: u64,
}

impl GenerateOptions {
    pub fn new(params: SamplingParams) -> Self {
        Self {
            params,
            prefill_chunk: None,
            default_seed: 0,
        }
    }
}

/// Why generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// A stop id (the model's end-of-generation ids or `stop_token_ids`).
    Stop,
    /// `max_tokens` reached.
    Length,
}

impl FinishReason {
    /// The OpenAI spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stop => "stop",
            Self::Length => "length",
        }
    }
}

/// The result of one generation.
#[derive(Clone, Debug)]
pub struct GenerateOutput {
    /// Generated ids, including the stop id when one ended generation.
    pub token_ids: Vec<u32>,
    /// Per generated token, its log-probability and top alternatives (when asked for).
    pub logprobs: Vec<Sampled>,
    pub finish_reason: FinishReason,
    pub prompt_tokens: usize,
    pub prompt_time: Duration,
    pub generation_time: Duration,
}

/// Generates from `prompt` with `exec`, calling `on_token(id)` for each new token. The arena is
/// reused from block 0, so earlier contents are overwritten.
pub fn generate(
    exec: &mut CpuExecutor,
    prompt: &[u32],
    opts: &GenerateOptions,
    mut on_token: impl FnMut(u32),
) -> Result<GenerateOutput, ModelError> {
    opts.params.validate()?;
    if prompt.is_empty() {
        return Err(ModelError::InvalidRequest("empty prompt".into()));
    }
    let config = exec.model.config().clone();
    let max_tokens = opts.params.max_tokens as usize;
    let total = prompt.len() + max_tokens;
    if total > config.context_length {
        return Err(ModelError::InvalidRequest(format!(
            "prompt of {} tokens + max_tokens {max_tokens} exceeds the context length {}",
            prompt.len(),
            config.context_length
        )));
    }
    let block_size = exec.kv_cache.block_size();
    let needed = total.div_ceil(block_size);
    if needed > exec.kv_cache.num_blocks() {
        return Err(ModelError::KvCacheFull {
            needed,
            available: exec.kv_cache.num_blocks(),
        });
    }
    let block_table: Vec<u32> = (0..needed as u32).collect();
    let mut stop_ids: Vec<u32> = opts.params.stop_token_ids.clone();
    if !opts.params.ignore_eos {
        stop_ids.extend(&config.eog_token_ids);
    }
    let mut sampler = Sampler::new(opts.params.clone(), opts.default_seed);

    let t0 = Instant::now();
    let chunk = opts.prefill_chunk.unwrap_or(prompt.len()).max(1);
    let mut next: Option<Sampled> = None;
    let mut start = 0;
    while start < prompt.len() {
        let end = (start + chunk).min(prompt.len());
        let last = end == prompt.len();
        let batch = ForwardBatch::from_seqs(
            &[SeqChunk {
                tokens: &prompt[start..end],
                start,
                block_table: &block_table,
                logits: if last { Logits::Last } else { Logits::None },
            }],
            block_size,
        );
        let logits = exec.forward(&batch)?;
        if last {
            next = Some(sampler.sample(logits));
        }
        start = end;
    }
    let prompt_time = t0.elapsed();

    let t1 = Instant::now();
    let mut token_ids = Vec::new();
    let mut logprobs = Vec::new();
    let mut finish_reason = FinishReason::Length;
    while let Some(sampled) = next.take() {
        let tok = sampled.token_id;
        token_ids.push(tok);
        on_token(tok);
        if opts.params.logprobs.is_some() {
            logprobs.push(sampled);
        }
        if stop_ids.contains(&tok) {
            finish_reason = FinishReason::Stop;
            break;
        }
        if token_ids.len() >= max_tokens {
            break;
        }
        let pos = prompt.len() + token_ids.len() - 1;
        let batch = ForwardBatch::from_seqs(
            &[SeqChunk {
                tokens: &[tok],
                start: pos,
                block_table: &block_table,
                logits: Logits::Last,
            }],
            block_size,
        );
        next = Some(sampler.sample(exec.forward(&batch)?));
    }
    Ok(GenerateOutput {
        token_ids,
        logprobs,
        finish_reason,
        prompt_tokens: prompt.len(),
        prompt_time,
        generation_time: t1.elapsed(),
    })
}
