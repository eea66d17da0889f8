//! pagoda-structured: structured output. A request's `Constraint` (JSON schema, regex, choice,
//! Lark grammar) is compiled by llguidance against the model's token trie, and each sequence's
//! `ConstraintMatcher` turns the grammar state into an allowed-token mask, step by step.

mod compile;
mod constraint;
mod engine;
mod error;
mod matcher;
mod outputs;
mod tok_env;

pub use compile::CompiledConstraint;
pub use constraint::Constraint;
pub use error::StructuredError;
pub use matcher::ConstraintMatcher;
pub use outputs::StructuredOutputs;
pub use tok_env::token_trie_words;
