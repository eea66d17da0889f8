//! The one error type of checkpoint loading; every message names the file, key or tensor.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum HfError {
    #[error("cannot read {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: {message}", path.display())]
    BadFile { path: PathBuf, message: String },
    #[error("{} is not a checkpoint directory: {reason}", path.display())]
    NotACheckpoint { path: PathBuf, reason: String },
    #[error("config.json: {0}")]
    Config(String),
    #[error(
        "architecture {0} is not supported (pagoda runs LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Gemma3ForCausalLM, BertModel, BertForSequenceClassification, Gemma3TextModel with bidirectional attention)"
    )]
    UnsupportedArchitecture(String),
    #[error("tensor {0} is missing from the checkpoint")]
    MissingTensor(String),
    #[error("tensor {name}: {detail}")]
    BadTensor { name: String, detail: String },
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    #[error(transparent)]
    Gguf(#[from] pagoda_gguf::GgufError),
}
