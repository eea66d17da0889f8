//! Per-request sampling parameters (OpenAI/llama.cpp vocabulary) and their validation.
//! `validate` names the offending field and its bound, so the HTTP layer can return it verbatim.

use thiserror::Error;

/// Largest number of top log-probabilities a request may ask for (OpenAI caps `top_logprobs` at 20).
pub const MAX_LOGPROBS: u32 = 20;

/// How one request picks its next token.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplingParams {
    /// 0 means greedy (argmax); otherwise logits are divided by it before the softmax.
    pub temperature: f32,
    /// Keep only the `top_k` most likely tokens; 0 disables the filter.
    pub top_k: u32,
    /// Keep the smallest set of tokens whose probability reaches `top_p`; 1 disables it.
    pub top_p: f32,
    /// Drop tokens whose probability is below `min_p` times the most likely one's; 0 disables it.
    pub min_p: f32,
    /// Seed of the request's own random stream; `None` lets the engine pick one.
    pub seed: Option<u64>,
    /// Most tokens to generate.
    pub max_tokens: u32,
    /// Token ids that end generation (in addition to the model's end-of-generation ids).
    pub stop_token_ids: Vec<u32>,
    /// Keep generating past the model's end-of-generation ids.
    pub ignore_eos: bool,
    /// How many top alternatives to report with each token's log-probability; `None` for none.
    pub logprobs: Option<u32>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            seed: None,
            max_tokens: 16,
            stop_token_ids: Vec::new(),
            ignore_eos: false,
            logprobs: None,
        }
    }
}

impl SamplingParams {
    /// Greedy decoding of up to `max_tokens` tokens.
    pub fn greedy(max_tokens: u32) -> Self {
        Self {
            temperature: 0.0,
            max_tokens,
            ..Self::default()
        }
    }

    /// True when the choice is the argmax: temperature 0 or `top_k == 1`.
    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0 || self.top_k == 1
    }

    /// Checks every field against its bound.
    pub fn validate(&self) -> Result<(), SamplingParamsError> {
        if !(self.temperature.is_finite() && (0.0..=100.0).contains(&self.temperature)) {
            return Err(SamplingParamsError::OutOfRange {
                field: "temperature",
                bound: "[0, 100]",
                value: self.temperature.to_string(),
            });
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(SamplingParamsError::OutOfRange {
                field: "top_p",
                bound: "(0, 1]",
                value: self.top_p.to_string(),
            });
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return Err(SamplingParamsError::OutOfRange {
                field: "min_p",
                bound: "[0, 1]",
                value: self.min_p.to_string(),
            });
        }
        if self.max_tokens == 0 {
            return Err(SamplingParamsError::OutOfRange {
                field: "max_tokens",
                bound: ">= 1",
                value: "0".to_string(),
            });
        }
        if let Some(n) = self.logprobs
            && n > MAX_LOGPROBS
        {
            return Err(SamplingParamsError::OutOfRange {
                field: "logprobs",
                bound: "[0, 20]",
                value: n.to_string(),
            });
        }
        Ok(())
    }
}

/// A sampling parameter outside its allowed range.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SamplingParamsError {
    /// `field` was `value`, outside `bound`.
    #[error("`{field}` must be in {bound}, got {value}")]
    OutOfRange {
        field: &'static str,
        bound: &'static str,
        value: String,
    },
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_greedy_are_valid() {
        assert_eq!(SamplingParams::default().validate(), Ok(()));
        let g = SamplingParams::greedy(8);
        assert_eq!(g.validate(), Ok(()));
        assert!(g.is_greedy());
        assert!(!SamplingParams::default().is_greedy());
    }

    #[test]
    fn each_bad_field_is_named() {
        let cases: Vec<(SamplingParams, &str)> = vec![
            (
                SamplingParams {
                    temperature: -0.5,
                    ..Default::default()
                },
                "temperature",
            ),
            (
                SamplingParams {
                    temperature: f32::NAN,
                    ..Default::default()
                },
                "temperature",
            ),
            (
                SamplingParams {
                    top_p: 0.0,
                    ..Default::default()
                },
                "top_p",
            ),
            (
                SamplingParams {
                    top_p: 1.5,
                    ..Default::default()
                },
                "top_p",
            ),
            (
                SamplingParams {
                    min_p: -0.1,
                    ..Default::default()
                },
                "min_p",
            ),
            (
                SamplingParams {
                    max_tokens: 0,
                    ..Default::default()
                },
                "max_tokens",
            ),
            (
                SamplingParams {
                    logprobs: Some(21),
                    ..Default::default()
                },
                "logprobs",
            ),
        ];
        for (params, field) in cases {
            let err = params.validate().unwrap_err();
            let SamplingParamsError::OutOfRange { field: got, .. } = &err;
            assert_eq!(*got, field);
            assert!(err.to_string().contains(field), "{err}");
        }
    }
}
