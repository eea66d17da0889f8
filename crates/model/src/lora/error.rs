//! Why an adapter file cannot be used with this model; every variant names the key or tensor.

use pagoda_kernels::quant::GgmlType;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum LoraError {
    #[error("gguf: {0}")]
    Gguf(#[from] pagoda_gguf::GgufError),
    #[error("not a LoRA adapter: general.type is {0:?}, expected \"adapter\"")]
    NotAnAdapter(Option<String>),
    #[error("adapter.type is {0:?}, only \"lora\" adapters are supported")]
    NotLora(Option<String>),
    #[error("the adapter is for architecture {adapter:?} but the model is {model:?}")]
    Architecture { adapter: String, model: String },
    #[error(
        "tensor `{0}` is not a LoRA tensor of this model (`blk.N.<projection>.weight.lora_a|lora_b`)"
    )]
    UnknownTensor(String),
    #[error("tensor `{0}`: adapters on the embeddings or the LM head are not supported")]
    UnsupportedTarget(String),
    #[error("tensor `{0}` has no matching `{1}`")]
    MissingPair(String, String),
    #[error("tensor `{name}` has unsupported type {ty} (LoRA tensors are f32, f16, bf16 or q8_0)")]
    TensorType { name: String, ty: GgmlType },
    #[error("tensor `{name}` has shape {got:?}, expected {expected:?}")]
    Shape {
        name: String,
        got: Vec<u64>,
        expected: Vec<u64>,
    },
    #[error("tensor `{name}` has rank {rank}, above the limit of {max} (--max-lora-rank)")]
    RankTooLarge {
        name: String,
        rank: usize,
        max: usize,
    },
    #[error("tensor `{name}` holds {got} bytes, expected {expected}")]
    TensorSize {
        name: String,
        got: usize,
        expected: usize,
    },
    #[error("tensor `{0}` holds a value that is not finite")]
    NotFinite(String),
    #[error("the adapter has no LoRA tensors")]
    Empty,
    #[error("adapter.lora.alpha is {0}, not a finite number")]
    BadAlpha(f32),
}
