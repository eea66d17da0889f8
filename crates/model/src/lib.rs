//! pagoda-model: turns a GGUF file into logits. `ModelConfig` and `Weights` read and check the
//! file; `Model` holds the llama/qwen2 and gemma3 architectures; `CpuExecutor` runs a flat
//! `ForwardBatch` against a paged `KvCache`; `Sampler` and `generate` pick tokens.

pub mod batch;
pub mod config;
mod error;
pub mod executor;
pub mod generate;
pub mod kv_cache;
pub mod models;
pub mod sampler;
pub mod weights;

pub use batch::{ForwardBatch, Logits, SeqChunk};
pub use config::{Architecture, ModelConfig};
pub use error::ModelError;
pub use executor::CpuExecutor;
pub use generate::{FinishReason, GenerateOptions, GenerateOutput, generate};
pub use kv_cache::KvCache;
pub use models::Model;
pub use sampler::{Sampled, Sampler, TokenLogprob};
