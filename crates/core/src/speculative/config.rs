//! The speculative-decoding settings of one engine, resolved and checked: the method that
//! proposes tokens and how many each sequence may propose per step. vLLM's
//! `--speculative-config` JSON is parsed at the binary's edge into this.

use crate::config::ConfigError;

/// Where proposed tokens come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SpecMethod {
    /// Prompt lookup: the tokens that followed the latest earlier occurrence of the context's
    /// suffix (n-gram lengths `min_n..=max_n`).
    Ngram { min_n: usize, max_n: usize },
    /// A suffix index over recent outputs and the request's own tokens (SuffixDecoding).
    Suffix,
    /// Both of the above for every sequence; the draft behind the longer matched context wins
    /// (`suffix+ngram`). The n-gram part matches `min_n..=max_n` tokens.
    SuffixNgram { min_n: usize, max_n: usize },
    /// A smaller model of the same vocabulary, run autoregressively.
    DraftModel { path: String },
}

impl SpecMethod {
    /// vLLM's spelling of the method.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Ngram { .. } => "ngram",
            Self::Suffix => "suffix",
            Self::SuffixNgram { .. } => "suffix+ngram",
            Self::DraftModel { .. } => "draft_model",
        }
    }
}

/// How many tokens a sequence may propose in one step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NumSpecTokens {
    /// Always up to K (the budget and the context permitting).
    Fixed(usize),
    /// Chosen each step, from 0 up to `max`, to maximise the batch's expected tokens per second.
    Auto { max: usize },
}

impl NumSpecTokens {
    /// The most any sequence may propose.
    pub fn max(self) -> usize {
        match self {
            Self::Fixed(k) | Self::Auto { max: k } => k,
        }
    }
}

/// Speculative decoding, on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecConfig {
    pub method: SpecMethod,
    pub num_speculative_tokens: NumSpecTokens,
}

/// The most tokens one sequence may propose per step: beyond it the verification chunk costs
/// more than an unlikely run of acceptances brings.
pub const MAX_SPEC_TOKENS: usize = 32;
/// `suffix+ngram`'s n-gram lengths by default: from 2 (a match this short already pays when
/// accepted, and the sequence's acceptance turns K down where it is not) to one below the
/// suffix index's depth, the longest match the suffix side reports, so matches compare.
pub const SUFFIX_NGRAM_DEFAULT: (usize, usize) = (2, 23);
/// The default cap of `auto`.
pub const DEFAULT_AUTO_MAX: usize = 8;

impl SpecConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        let k = self.num_speculative_tokens.max();
        if !(1..=MAX_SPEC_TOKENS).contains(&k) {
            return Err(ConfigError::OutOfRange {
                field: "num_speculative_tokens",
                bound: format!("in [1, {MAX_SPEC_TOKENS}]"),
                value: k.to_string(),
            });
        }
        if let SpecMethod::Ngram { min_n, max_n } | SpecMethod::SuffixNgram { min_n, max_n } =
            self.method
        {
            if min_n == 0 {
                return Err(ConfigError::OutOfRange {
                    field: "prompt_lookup_min",
                    bound: ">= 1".into(),
                    value: "0".into(),
                });
            }
            if max_n < min_n || max_n > 64 {
                return Err(ConfigError::OutOfRange {
                    field: "prompt_lookup_max",
                    bound: format!("in [prompt_lookup_min = {min_n}, 64]"),
                    value: max_n.to_string(),
                });
            }
        }
        if let SpecMethod::DraftModel { path } = &self.method
            && path.is_empty()
        {
            return Err(ConfigError::OutOfRange {
                field: "model",
                bound: "a draft model path".into(),
                value: "\"\"".into(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_values_name_their_field() {
        let ok = SpecConfig {
            method: SpecMethod::Ngram { min_n: 2, max_n: 4 },
            num_speculative_tokens: NumSpecTokens::Fixed(4),
        };
        assert_eq!(ok.validate(), Ok(()));
        let field = |c: SpecConfig| match c.validate() {
            Err(ConfigError::OutOfRange { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        let mut c = ok.clone();
        c.num_speculative_tokens = NumSpecTokens::Fixed(0);
        assert_eq!(field(c), "num_speculative_tokens");
        let mut c = ok.clone();
        c.method = SpecMethod::Ngram { min_n: 3, max_n: 2 };
        assert_eq!(field(c), "prompt_lookup_max");
        let mut c = ok;
        c.method = SpecMethod::Ngram { min_n: 0, max_n: 2 };
        assert_eq!(field(c), "prompt_lookup_min");
    }
}
