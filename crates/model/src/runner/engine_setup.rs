//! Sizing and building an engine for a loaded model: the KV budget becomes a block count
//! (reported at start-up: bytes per token, blocks, the longest context that fits), the context
//! length is capped to what fits, the proposer of speculative decoding is built, and the
//! runner is wrapped in an `EngineCore`.

use pagoda_core::config::{check_kv_budget, default_kv_budget};
use pagoda_core::{CacheConfig, EngineCore, SpecConfig, SpecMethod};
use pagoda_speculative::{NgramProposer, SuffixConfig, SuffixNgramProposer, SuffixProposer};

use std::sync::Arc;

use crate::kv::transfer::{self, KvSender, TransferStore};
use crate::runner::parallel_setup;
use crate::runner::setup::EngineSetup;
use crate::{
    CpuExecutor, DiskTier, DraftProposer, KvCacheDtype, KvDiskConfig, KvGroupPlan, Model,
    ModelError, ModelRunner,
};
use pagoda_core::kv::KvRole;

/// The KV pool as sized, for the start-up log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvReport {
    pub dtype: KvCacheDtype,
    /// K and V of one token over all layers, int8 scales included.
    pub bytes_per_token: u64,
    pub num_blocks: usize,
    pub block_size: usize,
    pub budget_bytes: u64,
    /// Tokens the whole pool holds (the longest context that fits).
    pub max_tokens_in_pool: usize,
    pub max_model_len: usize,
    /// KV groups (one block table each per sequence), how many slide, and the layers each
    /// block holds.
    pub num_groups: usize,
    pub num_sliding_groups: usize,
    pub layers_per_block: usize,
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
    let ranks = setup.tensor_parallel.size;
    parallel_setup::check(&config, setup)?;
    // int8 scales included: a layer's share of one token's K and V, over all ranks (each
    // holds its KV heads; replicated heads count once per rank holding them).
    let kv_heads_held = if ranks > 1 {
        ranks * (config.n_kv_heads / ranks).max(1)
    } else {
        config.n_kv_heads
    };
    let bytes_per_token =
        (config.kv_bytes_per_token() * kv_heads_held / config.n_kv_heads.max(1)) as u64;
    let layer_bytes = bytes_per_token / config.n_layers.max(1) as u64;
    let budget = match setup.kv_cache_memory {
        Some(b) => {
            check_kv_budget(b).map_err(|e| ModelError::InvalidRequest(e.to_string()))?;
            b
        }
        None => default_kv_budget(),
    };
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
    // A block holds one group's layers: with sliding groups, more and smaller blocks.
    let size = |plan: &KvGroupPlan| -> Result<(CacheConfig, usize), ModelError> {
        let mut cache = CacheConfig::from_budget(
            budget,
            plan.layers_per_group() as u64 * layer_bytes,
            setup.block_size,
            setup.enable_prefix_caching,
        )
        .map_err(|e| ModelError::InvalidRequest(e.to_string()))?;
        cache.groups = plan.groups().to_vec();
        cache.hash_seed.clone_from(&setup.prefix_cache_hash_seed);
        let longest = longest_sequence(&cache, setup.scheduler.max_num_batched_tokens);
        Ok((cache, longest))
    };
    let single = KvGroupPlan::single(config.n_layers);
    let (mut plan, (mut cache, mut pool_tokens)) = (single.clone(), size(&single)?);
    if setup.sliding_window_freeing {
        let grouped = KvGroupPlan::by_attention(&config);
        let (g_cache, g_tokens) = size(&grouped)?;
        // Each sliding group keeps a window plus a chunk in reserve: a pool too small for
        // that would hold a shorter sequence than without freeing, so freeing stays off.
        if grouped.num_groups() == 1 || g_tokens >= wanted.min(pool_tokens) {
            (plan, cache, pool_tokens) = (grouped, g_cache, g_tokens);
        } else {
            tracing::info!(
                grouped = g_tokens,
                single = pool_tokens,
                "sliding-window freeing off: the KV pool is too small for its window reserve"
            );
        }
    }
    if plan.num_groups() > 1 && setup.scheduler.context_shift_keep.is_some() {
        // A shift moves blocks of every layer alike; sliding groups hold other blocks (and
        // none outside their window), so the two are not combined yet.
        return Err(ModelError::InvalidRequest(
            "--context-shift is not supported together with sliding-window block freeing: \
             add --disable-sliding-window-freeing"
                .to_owned(),
        ));
    }
    let max_model_len = wanted.min(pool_tokens);
    let mut scheduler = setup.scheduler.clone();
    scheduler.max_model_len = max_model_len;
    scheduler
        .validate()
        .map_err(|e| ModelError::InvalidRequest(e.to_string()))?;
    let report = KvReport {
        dtype: setup.kv_cache_dtype,
        bytes_per_token,
        num_blocks: cache.num_blocks,
        block_size: cache.block_size,
        budget_bytes: budget,
        max_tokens_in_pool: pool_tokens,
        max_model_len,
        num_groups: plan.num_groups(),
        num_sliding_groups: plan
            .groups()
            .iter()
            .filter(|g| g.sliding_window.is_some())
            .count(),
        layers_per_block: plan.layers_per_group(),
    };
    let eog_ids = config.eog_token_ids.clone();
    let vocab = config.vocab_size;
    let mut exec = parallel_setup::executor(model, setup, plan, &cache)?;
    let tier = match &setup.kv_disk {
        Some(c) if setup.enable_prefix_caching => Some(Arc::new(open_tier(c, &mut exec, &cache)?)),
        Some(c) => {
            tracing::warn!(dir = %c.dir.display(), "KV disk tier off: prefix caching is off");
            None
        }
        None => None,
    };
    let transfer = open_transfer(setup, &exec, &cache)?;
    let mut runner = ModelRunner::new(exec);
    if let Some(t) = &tier {
        runner = runner.with_kv_tier(Arc::clone(t) as Arc<dyn crate::TierBytes>);
    }
    let mut store = None;
    match transfer {
        Some(Transfer::Send(s)) => runner = runner.with_kv_sender(Arc::new(s)),
        Some(Transfer::Receive(s)) => {
            let s = Arc::new(s);
            runner = runner.with_kv_tier(Arc::clone(&s) as Arc<dyn crate::TierBytes>);
            store = Some(s);
        }
        None => {}
    }
    if let Some(spec) = &setup.speculative {
        spec.validate()
            .map_err(|e| ModelError::InvalidRequest(format!("speculative_config: {e}")))?;
        runner = with_proposer(runner, spec, draft, &cache, setup.kv_cache_dtype)?;
    }
    let mut core = EngineCore::new(runner, scheduler, &cache, eog_ids, vocab);
    if let Some(t) = tier {
        core.set_kv_tier(t);
    }
    if let Some(s) = store {
        core.set_kv_tier(s);
    }
    if let Some(spec) = &setup.speculative {
        core.enable_speculation(spec.clone());
        tracing::info!(
            "speculative decoding: {} with {:?} tokens per step",
            spec.method.name(),
            spec.num_speculative_tokens
        );
    }
    if let Some(targets) = setup.slo {
        core.enable_slo(targets);
        let ms = |d: Option<std::time::Duration>| {
            d.map_or("none".into(), |d| format!("{} ms", d.as_millis()))
        };
        tracing::info!(
            "SLO policy: TTFT {}, TPOT {} (steps sized to the TPOT target, requests predicted past the TTFT target refused)",
            ms(targets.ttft),
            ms(targets.tpot)
        );
    }
    tracing::info!(
        "KV cache ({}): {} bytes per token, {} blocks of {} tokens x {} layers ({:.1} MiB); {} groups ({} sliding-window); capacity {} tokens of KV in every layer, one sequence up to {} tokens; max_model_len {}",
        setup.kv_cache_dtype.name(),
        report.bytes_per_token,
        report.num_blocks,
        report.block_size,
        report.layers_per_block,
        budget_used_mib(&report, layer_bytes),
        report.num_groups,
        report.num_sliding_groups,
        report.num_blocks * report.block_size / report.num_groups.max(1),
        report.max_tokens_in_pool,
        report.max_model_len
    );
    Ok((core, report))
}

/// The byte path of prefill/decode disaggregation for this replica's role.
enum Transfer {
    Send(KvSender),
    Receive(TransferStore),
}

/// Starts the sender (prefill role) or the listener and store (decode role). The decode role
/// takes the engine's one lower-tier slot, so it cannot run with the disk tier.
fn open_transfer(
    setup: &EngineSetup,
    exec: &CpuExecutor,
    cache: &CacheConfig,
) -> Result<Option<Transfer>, ModelError> {
    let Some(c) = &setup.kv_transfer else {
        return Ok(None);
    };
    // Whole payloads (every KV head's), whatever the split: peers need not split alike.
    let whole = exec.whole_kv_shape()?;
    let layout = transfer::layout_digest(&c.model_identity, &whole, &cache.groups);
    let payload_len = whole.block_payload_len();
    let io = |e: std::io::Error| ModelError::InvalidRequest(format!("KV transfer: {e}"));
    Ok(match c.role {
        KvRole::Both => None,
        KvRole::Prefill => Some(Transfer::Send(
            KvSender::start(
                layout,
                payload_len,
                c.timeout,
                c.secret.clone(),
                Arc::clone(&c.counters),
            )
            .map_err(io)?,
        )),
        KvRole::Decode => {
            if setup.kv_disk.is_some() {
                return Err(ModelError::InvalidRequest(
                    "--kv-role decode cannot be combined with --kv-disk-dir (one lower KV tier)"
                        .into(),
                ));
            }
            if !setup.enable_prefix_caching {
                return Err(ModelError::InvalidRequest(
                    "--kv-role decode needs prefix caching (imported blocks are cached blocks)"
                        .into(),
                ));
            }
            Some(Transfer::Receive(
                TransferStore::open(c, layout, payload_len)
                    .map_err(|e| io(std::io::Error::other(format!("{}: {e}", c.listen))))?,
            ))
        }
    })
}

/// Opens the disk tier for `exec`'s arena, timing one 64-token prefill chunk first for the
/// read-or-recompute decision (attention makes longer prompts dearer per token, so this
/// errs toward recomputing).
fn open_tier(
    config: &KvDiskConfig,
    exec: &mut CpuExecutor,
    cache: &CacheConfig,
) -> Result<DiskTier, ModelError> {
    let prefill_tps = match config.prefill_tokens_per_sec {
        Some(t) => t as f64,
        None => crate::runner::calibration::time_steps(exec, &[64])
            .first()
            .map_or(1000.0, |&(n, secs)| n as f64 / secs.max(1e-9)),
    };
    // Files hold whole payloads (every KV head's): a split server reads one process's files.
    let tier = DiskTier::open(config, &exec.whole_kv_shape()?, &cache.groups, prefill_tps)
        .map_err(|e| ModelError::InvalidRequest(e.to_string()))?;
    tracing::info!(
        dir = %config.dir.display(),
        max_bytes = config.max_bytes,
        prefill_tokens_per_sec = prefill_tps.round(),
        "KV disk tier on"
    );
    Ok(tier)
}

/// The longest sequence the pool holds alone: every full group needs a block per
/// `block_size` tokens, a sliding group at most its window plus a prefill chunk.
fn longest_sequence(cache: &CacheConfig, max_chunk: usize) -> usize {
    let bs = cache.block_size;
    let (mut full, mut reserve) = (0usize, 0usize);
    for g in &cache.groups {
        match g.sliding_window {
            None => full += 1,
            Some(w) => reserve += (w + max_chunk).div_ceil(bs) + 1,
        }
    }
    if full == 0 {
        return if reserve <= cache.num_blocks {
            usize::MAX
        } else {
            0
        };
    }
    cache.num_blocks.saturating_sub(reserve) / full * bs
}

fn budget_used_mib(report: &KvReport, layer_bytes: u64) -> f64 {
    (report.num_blocks * report.block_size * report.layers_per_block) as f64 * layer_bytes as f64
        / 1048576.0
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
        SpecMethod::SuffixNgram { min_n, max_n } => {
            let p = SuffixNgramProposer::new(SuffixConfig::default(), *min_n, *max_n)
                .map_err(|e| bad(e.to_string()))?;
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
