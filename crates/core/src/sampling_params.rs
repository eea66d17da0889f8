//! Per-request sampling parameters (OpenAI/llama.cpp vocabulary) and their validation.
//! `validate` names the offending field and its bound, so the HTTP layer can return it verbatim.

use thiserror::Error;

use crate::constraint::ConstraintRef;
use crate::lora::LoraRef;

/// Largest number of top log-probabilities a request may ask for (OpenAI caps `top_logprobs` at 20).
pub const MAX_LOGPROBS: u32 = 20;
/// Most completions one request may ask for (`n`); each one costs a full sequence of KV blocks.
pub const MAX_N: u32 = 16;
/// OpenAI's bound on `presence_penalty` and `frequency_penalty` (absolute value).
pub const MAX_PRESENCE_FREQUENCY_PENALTY: f32 = 2.0;
/// vLLM's upper bound on `repetition_penalty` (it must also be above 0).
pub const MAX_REPETITION_PENALTY: f32 = 2.0;
/// OpenAI's bound on each `logit_bias` value (absolute value).
pub const MAX_LOGIT_BIAS: f32 = 100.0;

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
    /// Subtracted once from the logit of every token already generated (OpenAI); 0 disables it.
    pub presence_penalty: f32,
    /// Subtracted from a token's logit once per time it was generated (OpenAI); 0 disables it.
    pub frequency_penalty: f32,
    /// Divides positive / multiplies negative logits of tokens seen in the prompt or the output
    /// (vLLM/HF `repetition_penalty`); 1 disables it.
    pub repetition_penalty: f32,
    /// `(token_id, bias)` pairs added to the logits before anything else (OpenAI `logit_bias`);
    /// a token listed twice gets both biases.
    pub logit_bias: Vec<(u32, f32)>,
    /// End-of-generation and stop token ids are banned until this many tokens were generated.
    pub min_tokens: u32,
    /// How many completions to generate for the prompt (the engine forks the request).
    pub n: u32,
    /// How many top alternatives to report for each prompt token; `None` for no prompt logprobs.
    pub prompt_logprobs: Option<u32>,
    /// Structured-output constraint the executor enforces with a token mask; `None` for free text.
    pub constraint: Option<ConstraintRef>,
    /// The LoRA adapter the request runs with; `None` for the base model. It travels to the
    /// executor with the parameters, like the constraint; set it with `CheckedRequest::with_lora`
    /// so the prefix-cache key follows.
    pub lora: Option<LoraRef>,
    /// Prefill/decode disaggregation: where the prompt's KV goes or comes from
    /// (`kv_transfer_params`); `None` for an ordinary request.
    pub kv_transfer: Option<crate::kv::KvTransfer>,
    /// The request's own cap on speculative tokens per step: `None` takes the engine's
    /// setting, `Some(0)` turns speculation off for it (the server checks it against the
    /// engine's maximum and method).
    pub num_speculative_tokens: Option<u32>,
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
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            repetition_penalty: 1.0,
            logit_bias: Vec::new(),
            min_tokens: 0,
            n: 1,
            prompt_logprobs: None,
            constraint: None,
            lora: None,
            kv_transfer: None,
            num_speculative_tokens: None,
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
            return Err(out_of_range("temperature", "[0, 100]", self.temperature));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(out_of_range("top_p", "(0, 1]", self.top_p));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return Err(out_of_range("min_p", "[0, 1]", self.min_p));
        }
        if self.max_tokens == 0 {
            return Err(out_of_range("max_tokens", ">= 1", 0));
        }
        if let Some(n) = self.logprobs
            && n > MAX_LOGPROBS
        {
            return Err(out_of_range("logprobs", "[0, 20]", n));
        }
        if let Some(n) = self.prompt_logprobs
            && n > MAX_LOGPROBS
        {
            return Err(out_of_range("prompt_logprobs", "[0, 20]", n));
        }
        for (field, value) in [
            ("presence_penalty", self.presence_penalty),
            ("frequency_penalty", self.frequency_penalty),
        ] {
            if !(-MAX_PRESENCE_FREQUENCY_PENALTY..=MAX_PRESENCE_FREQUENCY_PENALTY).contains(&value)
            {
                return Err(out_of_range(field, "[-2, 2]", value));
            }
        }
        if !(self.repetition_penalty > 0.0 && self.repetition_penalty <= MAX_REPETITION_PENALTY) {
            return Err(out_of_range(
                "repetition_penalty",
                "(0, 2]",
                self.repetition_penalty,
            ));
        }
        for &(token_id, bias) in &self.logit_bias {
            if !(-MAX_LOGIT_BIAS..=MAX_LOGIT_BIAS).contains(&bias) {
                return Err(out_of_range(
                    "logit_bias",
                    "[-100, 100]",
                    format!("{bias} for token {token_id}"),
                ));
            }
        }
        if self.min_tokens > self.max_tokens {
            return Err(out_of_range(
                "min_tokens",
                "[0, max_tokens]",
                format!("{} with max_tokens {}", self.min_tokens, self.max_tokens),
            ));
        }
        if !(1..=MAX_N).contains(&self.n) {
            return Err(out_of_range("n", "[1, 16]", self.n));
        }
        Ok(())
    }

    /// Checks the token ids of `logit_bias` and `stop_token_ids` against the model's vocabulary,
    /// which `validate` cannot see.
    pub fn validate_against_vocab(&self, vocab_size: usize) -> Result<(), SamplingParamsError> {
        let outside = |id: u32| id as usize >= vocab_size;
        let bad_bias = self
            .logit_bias
            .iter()
            .map(|&(id, _)| id)
            .find(|&id| outside(id));
        let bad_stop = self.stop_token_ids.iter().copied().find(|&id| outside(id));
        for (field, bad) in [("logit_bias", bad_bias), ("stop_token_ids", bad_stop)] {
            if let Some(token_id) = bad {
                return Err(SamplingParamsError::TokenOutsideVocab {
                    field,
                    token_id,
                    vocab_size,
                });
            }
        }
        Ok(())
    }
}

fn out_of_range(
    field: &'static str,
    bound: &'static str,
    value: impl ToString,
) -> SamplingParamsError {
    SamplingParamsError::OutOfRange {
        field,
        bound,
        value: value.to_string(),
    }
}

/// A sampling parameter outside its allowed range.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SamplingParamsError {
    /// `field` was `value`, outside `bound`.
    #[error("{}", self.describe(&|f| f))]
    OutOfRange {
        field: &'static str,
        bound: &'static str,
        value: String,
    },
    /// `field` names a token id the model's vocabulary does not have.
    #[error("{}", self.describe(&|f| f))]
    TokenOutsideVocab {
        field: &'static str,
        token_id: u32,
        vocab_size: usize,
    },
}

impl SamplingParamsError {
    /// The offending request field (for the `param` of an OpenAI error body).
    pub fn field(&self) -> &'static str {
        match self {
            Self::OutOfRange { field, .. } | Self::TokenOutsideVocab { field, .. } => field,
        }
    }

    /// The message with the field passed through `name` (an API's own spelling of it).
    pub fn describe(&self, name: &dyn Fn(&'static str) -> &'static str) -> String {
        match self {
            Self::OutOfRange {
                field,
                bound,
                value,
            } => format!("`{}` must be in {bound}, got {value}", name(field)),
            Self::TokenOutsideVocab {
                field,
                token_id,
                vocab_size,
            } => format!(
                "`{}` token id {token_id} is outside the vocabulary of {vocab_size} tokens",
                name(field)
            ),
        }
    }
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
    fn defaults_disable_every_adjustment() {
        let p = SamplingParams::default();
        assert_eq!(p.presence_penalty, 0.0);
        assert_eq!(p.frequency_penalty, 0.0);
        assert_eq!(p.repetition_penalty, 1.0);
        assert!(p.logit_bias.is_empty());
        assert_eq!(p.min_tokens, 0);
        assert_eq!(p.n, 1);
        assert_eq!(p.prompt_logprobs, None);
    }

    fn with(edit: impl FnOnce(&mut SamplingParams)) -> SamplingParams {
        let mut p = SamplingParams::default();
        edit(&mut p);
        p
    }

    #[test]
    fn each_bad_field_is_named() {
        let cases: Vec<(SamplingParams, &str)> = vec![
            (with(|p| p.temperature = -0.5), "temperature"),
            (with(|p| p.temperature = f32::NAN), "temperature"),
            (with(|p| p.top_p = 0.0), "top_p"),
            (with(|p| p.top_p = 1.5), "top_p"),
            (with(|p| p.min_p = -0.1), "min_p"),
            (with(|p| p.max_tokens = 0), "max_tokens"),
            (with(|p| p.logprobs = Some(21)), "logprobs"),
            (with(|p| p.prompt_logprobs = Some(21)), "prompt_logprobs"),
            (with(|p| p.presence_penalty = 2.01), "presence_penalty"),
            (with(|p| p.presence_penalty = -2.01), "presence_penalty"),
            (with(|p| p.presence_penalty = f32::NAN), "presence_penalty"),
            (with(|p| p.frequency_penalty = 2.5), "frequency_penalty"),
            (with(|p| p.frequency_penalty = -3.0), "frequency_penalty"),
            (with(|p| p.repetition_penalty = 0.0), "repetition_penalty"),
            (with(|p| p.repetition_penalty = -1.0), "repetition_penalty"),
            (with(|p| p.repetition_penalty = 2.01), "repetition_penalty"),
            (
                with(|p| p.repetition_penalty = f32::NAN),
                "repetition_penalty",
            ),
            (with(|p| p.logit_bias = vec![(3, 100.5)]), "logit_bias"),
            (
                with(|p| p.logit_bias = vec![(3, 1.0), (4, -101.0)]),
                "logit_bias",
            ),
            (with(|p| p.logit_bias = vec![(3, f32::NAN)]), "logit_bias"),
            (with(|p| p.min_tokens = 17), "min_tokens"),
            (with(|p| p.n = 0), "n"),
            (with(|p| p.n = 17), "n"),
        ];
        for (params, field) in cases {
            let err = params.validate().unwrap_err();
            assert!(matches!(err, SamplingParamsError::OutOfRange { .. }));
            assert_eq!(err.field(), field, "{err}");
            assert!(err.to_string().contains(&format!("`{field}`")), "{err}");
        }
    }

    #[test]
    fn values_on_the_bounds_are_accepted() {
        let edge = [
            with(|p| p.logprobs = Some(20)),
            with(|p| p.prompt_logprobs = Some(0)),
            with(|p| p.prompt_logprobs = Some(20)),
            with(|p| {
                p.presence_penalty = -2.0;
                p.frequency_penalty = 2.0;
            }),
            with(|p| {
                p.presence_penalty = 2.0;
                p.frequency_penalty = -2.0;
            }),
            with(|p| p.repetition_penalty = 2.0),
            with(|p| p.repetition_penalty = 0.01),
            with(|p| p.logit_bias = vec![(0, -100.0), (1, 100.0)]),
            with(|p| p.min_tokens = 16),
            with(|p| p.n = 16),
        ];
        for params in edge {
            assert_eq!(params.validate(), Ok(()), "{params:?}");
        }
    }

    #[test]
    fn vocab_check_names_the_out_of_vocab_id() {
        let ok = with(|p| {
            p.logit_bias = vec![(99, 1.0)];
            p.stop_token_ids = vec![0, 99];
        });
        assert_eq!(ok.validate_against_vocab(100), Ok(()));
        let bias = with(|p| p.logit_bias = vec![(5, 1.0), (100, 1.0)]);
        let err = bias.validate_against_vocab(100).unwrap_err();
        assert_eq!(
            err,
            SamplingParamsError::TokenOutsideVocab {
                field: "logit_bias",
                token_id: 100,
                vocab_size: 100
            }
        );
        assert!(err.to_string().contains("100"), "{err}");
        let stop = with(|p| p.stop_token_ids = vec![7, 1000]);
        let err = stop.validate_against_vocab(100).unwrap_err();
        assert_eq!(err.field(), "stop_token_ids");
        assert!(err.to_string().contains("1000"), "{err}");
    }
}
