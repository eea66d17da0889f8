//! pagoda-speculative: proposers for speculative decoding that look only at token ids (no model):
//! n-gram prompt lookup (vLLM's `ngram_proposer.py`), SuffixDecoding (Arctic Inference), and
//! the two combined (the longer match wins).
//! The engine asks a `Proposer` for draft tokens each step; the target model verifies them.
#![deny(missing_docs)]

mod combined;
mod error;
mod ngram;
mod proposer;
mod suffix;
mod suffix_tree;

pub use combined::SuffixNgramProposer;
pub use error::SpecConfigError;
pub use ngram::NgramProposer;
pub use proposer::{ProposeRequest, Proposer};
pub use suffix::{SuffixConfig, SuffixProposer};
