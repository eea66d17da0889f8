//! Model quality measurements, as llama.cpp's `llama-perplexity`: perplexity over a text in
//! fixed windows (`perplexity`), a file of full-vocabulary log-probabilities from a base model
//! (`logprob_file`), and the KL divergence of another model, quant or KV type against it (`kld`).

pub mod kld;
pub mod logprob_file;
pub mod perplexity;

pub use kld::{KldStats, KldSummary, compare_row};
pub use logprob_file::{LogprobFileError, LogprobReader, LogprobWriter};
pub use perplexity::{ChunkPlan, Evaluator, NllStats, log_softmax};

/// Why an evaluation could not run.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    #[error("the text has {tokens} tokens, fewer than one window of --ctx {ctx}")]
    TextTooShort { tokens: usize, ctx: usize },
    #[error("--ctx must be between 4 and the model's context of {max}, got {got}")]
    BadContext { got: usize, max: usize },
    #[error(transparent)]
    Model(#[from] crate::ModelError),
    #[error(transparent)]
    File(#[from] LogprobFileError),
}
