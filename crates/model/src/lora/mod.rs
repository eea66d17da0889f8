//! LoRA adapters over the base model: one in-memory form (`LoraAdapter`, in the kernels'
//! layout) read from a GGUF adapter file (llama.cpp's `convert_lora_to_gguf.py`; a PEFT
//! directory is converted to one in memory by `pagoda-hf`), a tensor-parallel rank's part of
//! one (`LoraShards`), and the per-step plan that adds each
//! adapter's low-rank product into the rows of the sequences that use it (`LoraRows`).

mod adapter;
mod error;
mod from_gguf;
mod shard;
mod step;
pub(crate) mod wire;

pub use adapter::{LoraAdapter, LoraTarget, LoraWeights};
pub use error::LoraError;
pub use from_gguf::LoraOptions;
pub(crate) use shard::LoraShards;
pub(crate) use step::LoraRows;
