//! Sizing and building an engine for a loaded model: the KV budget becomes a block count
//! (reported at start-up: bytes per token, blocks, the longest context that fits), the context
//! length is capped to what fits, the proposer of speculative decoding is built, and the
//! runner is wrapped in an `EngineCore`.

use pagoda_core::config::{check_kv_budget, default_kv_budget};
use pagoda_core::{CacheConfig, EngineCore, SchedulerConfig, SpecConfig, SpecMethod};
use pagoda_spec::{NgramProposer, SuffixConfig, SuffixProposer};

use crate::{CpuExecutor, DraftProposer, KvCacheDtype, Model, ModelError, ModelRunner};

/// What a user may choose about the engine; `None` means the default.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineSetup {
    pub scheduler: SchedulerConfig,
    /// Bytes for all layers' K and V; default: a quarter of available memory, at most 4 GiB.
    pub kv_cache_memory: Option<u64>,
    pub block_size: usize,
    pub enable_prefix_caching: bool,
    /// Root seed of the prefix cache's block hashes (docs/scale-out.md).
    pub prefix_cache_hash_seed: String,
    /// Longest sequence; default: the model's training context, capped to the KV pool.
    pub max_model_len: Option<usize>,
    /// Element type of the KV cache: f16 by default (half the bytes attention reads and the
    /// memory a token holds of f32).
    pub kv_cache_dtype: KvCacheDtype,
    /// Speculative decoding, when on (a draft model is passed to `build_engine_with_draft`).
    pub speculative: Option<SpecConfig>,
}

impl Default for EngineSetup {
    fn default() -> Self {
        Self {
            scheduler: SchedulerConfig::default(),
            kv_cache_memory: None,
            block_size: 16,
            enable_prefix_caching: true,
            prefix_cache_hash_seed: pagoda_core::kv::block_hash::DEFAULT_HASH_SEED.to_string(),
            max_model_len: None,
            kv_cache_dtype: KvCacheDtype::default(),
            speculative: None,
        }
    }
}

/// The KV pool as sized, for the start-up log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvReport {
    pub bytes_per_token: u64,
    pub num_blocks: usize,
    pub block_size: usize,
    pub budget_bytes: u64,
    /// Tokens the whole pool holds (the longest context that fits).
    pub max_tokens_in_pool: usize,
    pub max_model_len: usize,
}

/// An engine core for `model`, with its KV pool sized from `setup`.
pub fn build_engine(
    model: Model,
    setup: &EngineSetup,
) -> Result<(EngineCore<ModelRunner>, KvReport), ModelError> {
    build_engine_with_draft(model, None, setup)
}

/// The same, with `draft` as the proposer when `setup.speculative` names a draft model.
pub fn build_engine_with_draft(
    mut model: Model,
    draft: Option<Model>,
    setup: &EngineSetup,
) -> Result<(EngineCore<ModelRunner>, KvReport), ModelError> {
    model.set_kv_cache_dtype(setup.kv_cache_dtype);
    let config = model.config().clone();
    let bytes_per_token =
        (2 * config.n_layers * config.kv_dim() * config.kv_cache_dtype.bytes()) as u64;
    let budget = match setup.kv_cache_memory {
        Some(b) => {
            check_kv_budget(b).map_err(|e| ModelError::InvalidRequest(e.to_string()))?;
            b
        }
        None => default_kv_budget(),
    };
    let mut cache = CacheConfig::from_budget(
        budget,
        bytes_per_token,
        setup.block_size,
        setup.enable_prefix_caching,
    )
    .map_err(|e| ModelError::InvalidRequest(e.to_string()))?;
    cache.hash_seed.clone_from(&setup.prefix_cache_hash_seed);
    let pool_tokens = cache.num_blocks * cache.block_size;
    let wanted = setup.max_model_len.unwrap_or(config.context_length);
    if setup
        .max_model_len
        .is_some_and(|m| m > config.context_length)
    {
        return Err(ModelError::InvalidRequest(format!(
            "max_model_len {wanted} is longer than the model's context of {}",
            config.context_length
        )));
    }
    let max_model_len = wanted.min(pool_tokens);
    let mut scheduler = setup.scheduler.clone();
    scheduler.max_model_len = max_model_len;
    scheduler
        .validate()
        .map_err(|e| ModelError::InvalidRequest(e.to_string()))?;
    let report = KvReport {
        bytes_per_token,
        num_blocks: cache.num_blocks,
        block_size: cache.block_size,
        budget_bytes: budget,
        max_tokens_in_pool: pool_tokens,
        max_model_len,
    };
    let eog_ids = config.eog_token_ids.clone();
    let vocab = config.vocab_size;
    let exec = CpuExecutor::new(model, cache.num_blocks, cache.block_size)?;
    let mut runner = ModelRunner::new(exec);
    if let Some(spec) = &setup.speculative {
        spec.validate()
            .map_err(|e| ModelError::InvalidRequest(format!("speculative_config: {e}")))?;
        runner = with_proposer(runner, spec, draft, &cache, setup.kv_cache_dtype)?;
    }
    let mut core = EngineCore::new(runner, scheduler, &cache, eog_ids, vocab);
    if let Some(spec) = &setup.speculative {
        core.enable_speculation(spec.clone());
        tracing::info!(
            "speculative decoding: {} with {:?} tokens per step",
            spec.method.name(),
            spec.num_speculative_tokens
        );
    }
    tracing::info!(
        "KV cache ({:?}): {} bytes per token, {} blocks of {} tokens ({:.1} MiB), {} tokens in all; max_model_len {}",
        setup.kv_cache_dtype,
        report.bytes_per_token,
        report.num_blocks,
        report.block_size,
        (report.num_blocks * report.block_size) as f64 * report.bytes_per_token as f64 / 1048576.0,
        report.max_tokens_in_pool,
        report.max_model_len
    );
    Ok((core, report))
}

/// Gives `runner` the proposer `spec` names. A draft model must share the target's vocabulary;
/// its arena holds as many tokens as the target's, so it never runs short before the target.
fn with_proposer(
    runner: ModelRunner,
    spec: &SpecConfig,
    draft: Option<Model>,
    cache: &CacheConfig,
    dtype: KvCacheDtype,
) -> Result<ModelRunner, ModelError> {
    let target = &runner.executor().model;
    let bad = |m: String| ModelError::InvalidRequest(format!("speculative_config: {m}"));
    Ok(match &spec.method {
        SpecMethod::Ngram { min_n, max_n } => {
            let p = NgramProposer::new(*min_n, *max_n).map_err(|e| bad(e.to_string()))?;
            runner.with_proposer(Box::new(p))
        }
        SpecMethod::Suffix => {
            let p = SuffixProposer::new(SuffixConfig::default()).map_err(|e| bad(e.to_string()))?;
            runner.with_proposer(Box::new(p))
        }
        SpecMethod::DraftModel { path } => {
            let Some(mut draft) = draft else {
                return Err(bad(format!("the draft model {path} was not loaded")));
            };
            DraftProposer::check_vocabulary(target, &draft)
                .map_err(|e| bad(format!("{path}: {e}")))?;
            draft.set_kv_cache_dtype(dtype);
            let p = DraftProposer::new(draft, cache.num_blocks, cache.block_size)?;
            runner.with_draft_model(p)
        }
    })
}
