//! `EngineSetup`: what a user may choose about an engine (scheduler limits, the KV budget,
//! block size and element type, prefix caching, speculation, the KV disk tier and transfer,
//! tensor and pipeline parallelism, the SLO policy), each with its default.

use pagoda_core::{SchedulerConfig, SloTargets, SpecConfig};

use crate::pipeline_parallel::PipelineParallelConfig;
use crate::tensor_parallel::TensorParallelConfig;
use crate::{KvCacheDtype, KvDiskConfig, KvTransferConfig};

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
    /// Sliding-window layers get their own block tables and give back the blocks that left
    /// their window (on by default; off keeps every layer's KV for every token, as before).
    pub sliding_window_freeing: bool,
    /// The disk tier of the prefix cache (`--kv-disk-dir`), off by default.
    pub kv_disk: Option<KvDiskConfig>,
    /// Prefill/decode disaggregation (`--kv-role`), off by default.
    pub kv_transfer: Option<KvTransferConfig>,
    /// Tensor parallelism (`--tensor-parallel-size`), one rank by default.
    pub tensor_parallel: TensorParallelConfig,
    /// Pipeline parallelism (`--pipeline-parallel-size`), one stage by default.
    pub pipeline_parallel: PipelineParallelConfig,
    /// Kernel threads of each rank or stage of a split model (`--threads` with either), each
    /// rank's pool pinned to its CPUs; `None`: as many as the rank's share of the CPUs.
    pub threads_per_rank: Option<usize>,
    /// The SLO policy's targets (`--slo`), off by default (docs/capacity.md).
    pub slo: Option<SloTargets>,
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
            sliding_window_freeing: true,
            kv_disk: None,
            kv_transfer: None,
            tensor_parallel: TensorParallelConfig::default(),
            pipeline_parallel: PipelineParallelConfig::default(),
            threads_per_rank: None,
            slo: None,
        }
    }
}
