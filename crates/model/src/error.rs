//! The model crate's error type: loading a GGUF into an architecture, validating a batch, and
//! running generation. Messages name the key, tensor or index that is wrong.

use pagoda_kernels::quant::GgmlType;
use thiserror::Error;

/// Everything that can go wrong between a GGUF file and a row of logits.
#[derive(Debug, Error)]
pub enum ModelError {
    /// The GGUF reader failed (I/O, format, a key of the wrong type).
    #[error("gguf: {0}")]
    Gguf(#[from] pagoda_gguf::GgufError),
    /// `general.architecture` names an architecture pagoda does not implement.
    #[error("unsupported architecture `{0}` (supported: llama, qwen2, qwen3, gemma3)")]
    UnsupportedArchitecture(String),
    /// A required metadata key is absent.
    #[error("missing metadata key `{0}`")]
    MissingKey(String),
    /// A metadata key holds a value the model cannot use.
    #[error("bad metadata key `{key}`: {reason}")]
    BadKey { key: String, reason: String },
    /// A required tensor is absent.
    #[error("missing tensor `{0}`")]
    MissingTensor(String),
    /// A tensor has the wrong shape.
    #[error("tensor `{name}` has shape {got:?}, expected {expected:?}")]
    TensorShape {
        name: String,
        got: Vec<u64>,
        expected: Vec<u64>,
    },
    /// A tensor has a type the kernels cannot use in this role.
    #[error("tensor `{name}` has unsupported type {ty}")]
    TensorType { name: String, ty: GgmlType },
    /// A tensor's data does not match its declared size.
    #[error("tensor `{name}` holds {got} bytes, expected {expected}")]
    TensorSize {
        name: String,
        got: usize,
        expected: usize,
    },
    /// A forward batch is inconsistent with itself, the vocabulary or the KV arena.
    #[error("invalid batch: {0}")]
    InvalidBatch(String),
    /// The KV arena cannot hold the request.
    #[error("KV arena too small: need {needed} blocks, have {available}")]
    KvCacheFull { needed: usize, available: usize },
    /// Tensor parallelism cannot split this model as asked, or a rank failed.
    #[error("tensor parallelism: {0}")]
    TensorParallel(#[from] crate::tensor_parallel::error::TpError),
    /// Pipeline parallelism cannot cut this model as asked, or a stage failed.
    #[error("pipeline parallelism: {0}")]
    PipelineParallel(#[from] crate::pipeline_parallel::error::PpError),
    /// A generation request is malformed (empty prompt, bad sampling parameters...).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
}

impl From<pagoda_core::SamplingParamsError> for ModelError {
    fn from(e: pagoda_core::SamplingParamsError) -> Self {
        ModelError::InvalidRequest(e.to_string())
    }
}
