//! pagoda-model: turns a GGUF file into logits. `ModelConfig` and `Weights` read and check the
//! file; `Model` holds the llama/qwen2 and gemma3 architectures; `CpuExecutor` runs a flat
//! `ForwardBatch` against a paged `KvCache`; `ModelRunner` drives it for the engine core
//! (`build_engine`), sampling with a per-sequence `Sampler`. `PackCache` keeps the kernels'
//! packed weight layout in a file beside the model, so later loads map it instead of repacking.

pub mod config;
pub mod encoder;
mod error;
pub mod eval;
pub mod kv;
pub mod lora;
pub mod models;
pub mod pack_cache;
pub mod pipeline_parallel;
pub mod runner;
pub mod sampler;
pub mod tensor_parallel;
pub mod weights;

pub use config::{Architecture, KvCacheDtype, ModelConfig};
pub use encoder::{Encoder, EncoderConfig, EncoderScratch, Pooling};
pub use error::ModelError;
pub use kv::cache::KvCache;
pub use kv::disk::{DiskTier, KvDiskConfig, KvDiskError};
pub use kv::groups::KvGroupPlan;
pub use kv::tier_bytes::TierBytes;
pub use kv::transfer::{KvSecret, KvTransferConfig, KvTransferCounters, SecretError};
pub use lora::{LoraAdapter, LoraError, LoraOptions, LoraTarget};
pub use models::Model;
pub use pack_cache::{CacheMiss, PackCache, PackCacheStatus};
pub use pipeline_parallel::{PipelineParallelConfig, PpCounters, PpError};
pub use runner::batch::{ForwardBatch, Logits, SeqChunk};
pub use runner::draft::DraftProposer;
pub use runner::engine_setup::{KvReport, build_engine, build_engine_with_draft};
pub use runner::executor::CpuExecutor;
pub use runner::model_runner::ModelRunner;
pub use runner::setup::EngineSetup;
pub use sampler::{PositionLogprobs, Sampled, Sampler, TokenLogprob, prompt_logprobs};
pub use tensor_parallel::{RankLayout, RankPart, TensorParallelConfig, TpCounters, TpError};
