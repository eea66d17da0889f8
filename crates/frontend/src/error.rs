//! Error types of the frontend: building a tokenizer from GGUF metadata, and chat templates.
//! Each message names the key, token or template that is wrong.

use crate::template_source::TemplateSource;

/// Why a tokenizer could not be built from a vocabulary.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error("GGUF metadata: {0}")]
    Gguf(String),
    #[error("GGUF metadata key `{0}` is missing")]
    MissingKey(&'static str),
    #[error("tokenizer model `{0}` is not supported (supported: `gpt2`, `llama`)")]
    UnsupportedModel(String),
    #[error("pre-tokenizer `{0}` (tokenizer.ggml.pre) is not supported")]
    UnsupportedPreTokenizer(String),
    #[error("`{key}` has {got} entries but the vocabulary has {expected} tokens")]
    LengthMismatch {
        key: &'static str,
        got: usize,
        expected: usize,
    },
    #[error("token id {id} in `{key}` is outside the vocabulary of {vocab_size} tokens")]
    IdOutOfRange {
        key: &'static str,
        id: u32,
        vocab_size: usize,
    },
    #[error("merge rule #{index} `{rule}` is not two space-separated pieces")]
    BadMerge { index: usize, rule: String },
    #[error("building the BPE model failed: {0}")]
    Bpe(String),
    #[error("{0}")]
    Json(String),
}

/// Why a chat template could not be compiled or rendered.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    #[error("GGUF metadata: {0}")]
    Gguf(String),
    #[error("chat template ({source_kind}) does not compile: {message}")]
    Compile {
        source_kind: TemplateSource,
        message: String,
    },
    #[error("chat template ({source_kind}) failed to render: {message}")]
    Render {
        source_kind: TemplateSource,
        message: String,
    },
}
