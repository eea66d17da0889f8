//! pagoda-model: turns a GGUF file into logits. `ModelConfig` and `Weights` read and check the
//! file; `Model` holds the llama/qwen2 and gemma3 architectures; `CpuExecutor` runs a flat
//! `ForwardBatch` against a paged `KvCache`; `ModelRunner` drives it for the engine core
//! (`build_engine`), sampling with a per-sequence `Sampler`. `PackCache` keeps the kernels'
//! packed weight layout in a file beside the model, so later loads map it instead of repacking.

pub mod batch;
pub mod config;
pub mod draft;
pub mod encoder;
pub mod engine_setup;
mod error;
pub mod eval;
pub mod executor;
pub mod kv_cache;
pub mod kv_disk;
pub mod kv_groups;
mod kv_shift;
pub mod kv_transfer;
pub mod lora;
pub mod model_runner;
pub mod models;
pub mod pack_cache;
pub mod sampler;
mod tier_bytes;
pub mod weights;

pub use batch::{ForwardBatch, Logits, SeqChunk};
pub use config::{Architecture, KvCacheDtype, ModelConfig};
pub use draft::DraftProposer;
pub use encoder::{Encoder, EncoderConfig, EncoderScratch, Pooling};
pub use engine_setup::{EngineSetup, KvReport, build_engine, build_engine_with_draft};
pub use error::ModelError;
pub use executor::CpuExecutor;
pub use kv_cache::KvCache;
pub use kv_disk::{DiskTier, KvDiskConfig, KvDiskError};
pub use kv_groups::KvGroupPlan;
pub use kv_transfer::{KvTransferConfig, KvTransferCounters};
pub use lora::{LoraAdapter, LoraError, LoraOptions, LoraTarget};
pub use model_runner::ModelRunner;
pub use models::Model;
pub use pack_cache::{CacheMiss, PackCache, PackCacheStatus};
pub use sampler::{PositionLogprobs, Sampled, Sampler, TokenLogprob, prompt_logprobs};
pub use tier_bytes::TierBytes;
