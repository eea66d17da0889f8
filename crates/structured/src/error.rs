//! Errors of compiling a constraint or advancing a matcher. The `Display` text names the
//! constraint kind and what is wrong, so the server can answer it verbatim as a 400.

use thiserror::Error;

#[derive(Error, Debug, Clone, PartialEq, Eq)]
pub enum StructuredError {
    #[error("invalid JSON schema: {0}")]
    InvalidJsonSchema(String),
    #[error("invalid regex: {0}")]
    InvalidRegex(String),
    #[error("invalid grammar: {0}")]
    InvalidGrammar(String),
    #[error("invalid choice: {0}")]
    InvalidChoice(String),
    /// Valid, but beyond one of the parser's limits (llguidance's `ParserLimits`, named with
    /// its value). Found while compiling, so it is a 400 before anything is generated.
    #[error("{what} too large for the parser: {detail} (limit `{limit}` = {value})")]
    TooLarge {
        /// The constraint kind, as the user would name it ("choice list", "grammar", ...).
        what: &'static str,
        /// The `ParserLimits` field that was exceeded.
        limit: &'static str,
        /// That limit's value.
        value: u64,
        /// llguidance's own account of it.
        detail: String,
    },
    /// The tokenizer could not be turned into a token trie (a broken vocabulary).
    #[error("structured output unavailable for this tokenizer: {0}")]
    Tokenizer(String),
    /// The matcher rejected a token or failed computing a mask (a bug or an exceeded limit).
    #[error("constrained decoding failed: {0}")]
    Matcher(String),
}
