//! The start-up side of tensor and pipeline parallelism: the rules that refuse a layout or a
//! feature not combined with it yet (`check`), and the executor of one rank, a tensor-parallel
//! group or a pipeline, with the rank layout logged once its ranks have loaded.

use pagoda_core::CacheConfig;

use crate::pipeline_parallel::{PpError, stages};
use crate::runner::setup::EngineSetup;
use crate::tensor_parallel::{self as tp, TpError};
use crate::{CpuExecutor, KvGroupPlan, Model, ModelConfig, ModelError};

/// The start-up rules: the heads must split over the tensor-parallel ranks, the layers over
/// the pipeline stages, the two are not combined, and the features that move KV blocks in or
/// out of the process (which live on every rank) are not combined with either yet, nor context
/// shift with a pipeline.
pub(crate) fn check(config: &ModelConfig, setup: &EngineSetup) -> Result<(), ModelError> {
    let (tp_size, pp_size) = (setup.tensor_parallel.size, setup.pipeline_parallel.size);
    tp::shard::check_heads(config, tp_size)?;
    stages::check(config.n_layers, pp_size)?;
    if tp_size > 1 && pp_size > 1 {
        return Err(PpError::WithTensorParallel {
            tp: tp_size,
            pp: pp_size,
        }
        .into());
    }
    if tp_size == 1 && pp_size == 1 {
        return Ok(());
    }
    let unsupported = [
        (setup.kv_disk.is_some(), "the KV disk tier (--kv-disk-dir)"),
        (
            setup.kv_transfer.is_some(),
            "prefill/decode disaggregation (--kv-role)",
        ),
        (
            // Each stage holds only its layers' KV; a rank holds every layer's (its heads).
            pp_size > 1 && setup.scheduler.context_shift_keep.is_some(),
            "context shift (--context-shift)",
        ),
    ];
    match unsupported.iter().find(|(on, _)| *on) {
        Some((_, what)) if pp_size > 1 => Err(PpError::Unsupported(what).into()),
        Some((_, what)) => Err(TpError::Unsupported(what).into()),
        None => Ok(()),
    }
}

/// The executor `setup` asks for over `plan` and `cache`'s blocks.
pub(crate) fn executor(
    model: Model,
    setup: &EngineSetup,
    plan: KvGroupPlan,
    cache: &CacheConfig,
) -> Result<CpuExecutor, ModelError> {
    let (blocks, block_size) = (cache.num_blocks, cache.block_size);
    let (tp_cfg, pp_cfg) = (&setup.tensor_parallel, &setup.pipeline_parallel);
    let exec = if tp_cfg.size > 1 {
        tracing::info!(
            "tensor parallelism: {} ranks as threads, shared-memory all-reduce (rank order), kernels inline on each rank",
            tp_cfg.size
        );
        CpuExecutor::tensor_parallel(model, tp_cfg, plan, blocks, block_size)?
    } else if pp_cfg.size > 1 {
        tracing::info!(
            "pipeline parallelism: {} stages as threads, residual stream handed over in memory, micro-batches per step: {}",
            pp_cfg.size,
            pp_cfg
                .micro_batches
                .map_or("round(sqrt((stages - 1) x rows / 4))".to_string(), |m| m
                    .to_string())
        );
        CpuExecutor::pipeline_parallel(model, pp_cfg, plan, blocks, block_size)?
    } else {
        return CpuExecutor::with_plan(model, plan, blocks, block_size);
    };
    exec.layout().log();
    Ok(exec)
}
