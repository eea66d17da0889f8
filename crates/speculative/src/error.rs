//! Configuration errors of the proposers: a bad value is refused when the proposer is built,
//! so `propose` itself never fails. Messages name the field and its bound.

use thiserror::Error;

/// A proposer configuration value out of range.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum SpecConfigError {
    /// `prompt_lookup_min` (the shortest n-gram) must be at least 1.
    #[error("`prompt_lookup_min` must be >= 1, got {0}")]
    NgramMinZero(usize),
    /// `prompt_lookup_max` must not be below `prompt_lookup_min`.
    #[error("`prompt_lookup_max` ({max}) must be >= `prompt_lookup_min` ({min})")]
    NgramMaxBelowMin {
        /// The shortest n-gram asked for.
        min: usize,
        /// The longest n-gram asked for.
        max: usize,
    },
    /// `max_tree_depth` must be at least 2 (one token to match, one to propose).
    #[error("`max_tree_depth` must be >= 2, got {0}")]
    TreeDepthTooSmall(usize),
    /// A float field that must be finite and non-negative.
    #[error("`{field}` must be finite and >= 0, got {value}")]
    NotNonNegative {
        /// The field's name.
        field: &'static str,
        /// The value given.
        value: f32,
    },
    /// `min_token_prob` is a probability.
    #[error("`min_token_prob` must be in [0, 1], got {0}")]
    MinTokenProb(f32),
}
