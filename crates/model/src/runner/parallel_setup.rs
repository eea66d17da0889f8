//! The start-up side of tensor and pipeline parallelism: the rules that refuse a layout or a
//! feature not combined with it yet (`check`), and the executor of one rank, a tensor-parallel
//! group or a pipeline, with the rank layout logged once its ranks have loaded.

use pagoda_core::CacheConfig;

use crate::pipeline_parallel::{PpError, stages};
use crate::runner::setup::EngineSetup;
use crate::tensor_parallel as tp;
use crate::{CpuExecutor, KvGroupPlan, Model, ModelConfig, ModelError};

/// The start-up rules: the heads must split over the tensor-parallel ranks, the layers over
/// the pipeline stages, the two are not combined, and the features that move or copy KV blocks
/// (the disk tier, transfers, context shift) are not combined with a pipeline yet.
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
    if pp_size == 1 {
        return Ok(());
    }
    // A stage holds only its layers' KV: moving or copying whole blocks would need every
    // stage's part (a tensor-parallel rank holds every layer's, its heads, and they merge).
    let unsupported = [
        (setup.kv_disk.is_some(), "the KV disk tier (--kv-disk-dir)"),
        (
            setup.kv_transfer.is_some(),
            "prefill/decode disaggregation (--kv-role)",
        ),
        (
            setup.scheduler.context_shift_keep.is_some(),
            "context shift (--context-shift)",
        ),
    ];
    match unsupported.iter().find(|(on, _)| *on) {
        Some((_, what)) => Err(PpError::Unsupported(what).into()),
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
        if tp_cfg.mpi.is_some() {
            tracing::info!(
                "tensor parallelism: {} ranks as the processes of an MPI job, all-reduce by MPI all-gather summed in rank order, each rank's kernels on its own pool",
                tp_cfg.size
            );
        } else {
            tracing::info!(
                "tensor parallelism: {} ranks as threads, shared-memory all-reduce (rank order), each rank's kernels on its own pool",
                tp_cfg.size
            );
        }
        CpuExecutor::tensor_parallel(
            model,
            tp_cfg,
            setup.threads_per_rank,
            plan,
            blocks,
            block_size,
        )?
    } else if pp_cfg.size > 1 {
        tracing::info!(
            "pipeline parallelism: {} stages as threads, residual stream handed over in memory, micro-batches per step: {}",
            pp_cfg.size,
            pp_cfg
                .micro_batches
                .map_or("round(sqrt((stages - 1) x rows / 4))".to_string(), |m| m
                    .to_string())
        );
        CpuExecutor::pipeline_parallel(
            model,
            pp_cfg,
            setup.threads_per_rank,
            plan,
            blocks,
            block_size,
        )?
    } else {
        return CpuExecutor::with_plan(model, plan, blocks, block_size);
    };
    exec.layout().log();
    Ok(exec)
}
