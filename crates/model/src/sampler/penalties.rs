//! The per-request token history and the penalties computed from it: vLLM/HF's repetition
//! penalty over prompt + output, OpenAI's presence/frequency penalties over the output only.
//! Only tokens in the history are touched, never the whole vocabulary.

use std::collections::{HashMap, HashSet};

use pagoda_core::SamplingParams;

/// What has been seen so far, kept only for the penalties that are switched on.
#[derive(Clone, Debug)]
pub(super) struct Penalties {
    repetition: f32,
    presence: f32,
    frequency: f32,
    /// Distinct prompt and output tokens; filled only when the repetition penalty is on.
    seen: HashSet<u32>,
    /// How often each token was generated; filled only when presence or frequency is on.
    counts: HashMap<u32, u32>,
}

impl Penalties {
    pub(super) fn new(params: &SamplingParams, prompt: &[u32]) -> Self {
        let mut penalties = Self {
            repetition: params.repetition_penalty,
            presence: params.presence_penalty,
            frequency: params.frequency_penalty,
            seen: HashSet::new(),
            counts: HashMap::new(),
        };
        if penalties.repetition_on() {
            penalties.seen.extend(prompt);
        }
        penalties
    }

    fn repetition_on(&self) -> bool {
        self.repetition != 1.0
    }

    fn presence_frequency_on(&self) -> bool {
        self.presence != 0.0 || self.frequency != 0.0
    }

    /// True when `apply` would change some logit.
    pub(super) fn is_active(&self) -> bool {
        // Each set is only filled while its penalty is on.
        !self.seen.is_empty() || !self.counts.is_empty()
    }

    /// Adds a generated token to the history.
    pub(super) fn record(&mut self, token_id: u32) {
        if self.repetition_on() {
            self.seen.insert(token_id);
        }
        if self.presence_frequency_on() {
            *self.counts.entry(token_id).or_insert(0) += 1;
        }
    }

    /// Applies the repetition penalty, then the frequency and presence penalties, in vLLM's
    /// order (vllm/model_executor/layers/utils.py `apply_penalties`).
    pub(super) fn apply(&self, logits: &mut [f32]) {
        for &id in &self.seen {
            if let Some(l) = logits.get_mut(id as usize) {
                // HF/vLLM: shrink positive logits, push negative ones further down.
                *l = if *l > 0.0 {
                    *l / self.repetition
                } else {
                    *l * self.repetition
                };
            }
        }
        for (&id, &count) in &self.counts {
            if let Some(l) = logits.get_mut(id as usize) {
                // `count` is at least 1 for every recorded token, so presence always applies.
                *l -= self.frequency * count as f32 + self.presence;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(repetition: f32, presence: f32, frequency: f32) -> SamplingParams {
        SamplingParams {
            repetition_penalty: repetition,
            presence_penalty: presence,
            frequency_penalty: frequency,
            ..Default::default()
        }
    }

    #[test]
    fn defaults_keep_no_history() {
        let mut p = Penalties::new(&SamplingParams::default(), &[1, 2, 3]);
        p.record(4);
        assert!(!p.is_active());
        assert!(p.seen.is_empty() && p.counts.is_empty());
    }

    #[test]
    fn repetition_divides_positive_and_multiplies_negative_logits() {
        let mut p = Penalties::new(&params(2.0, 0.0, 0.0), &[0, 1]);
        p.record(3);
        let mut logits = [4.0f32, -3.0, 5.0, 0.0, 1.5];
        p.apply(&mut logits);
        // Prompt tokens 0, 1 and generated token 3 are penalised; 2 and 4 are untouched.
        assert_eq!(logits, [2.0, -6.0, 5.0, 0.0, 1.5]);
    }

    #[test]
    fn frequency_and_presence_count_generated_tokens_only() {
        let mut p = Penalties::new(&params(1.0, 0.5, 0.25), &[4]);
        for t in [1, 1, 1, 2] {
            p.record(t);
        }
        let mut logits = [1.0f32, 1.0, 1.0, 1.0, 1.0];
        p.apply(&mut logits);
        // Token 1: 1 - (0.25 * 3 + 0.5) = -0.25; token 2: 1 - (0.25 + 0.5) = 0.25;
        // prompt token 4 is not an output token, so it stays.
        assert_eq!(logits, [1.0, -0.25, 0.25, 1.0, 1.0]);
    }

    #[test]
    fn repetition_applies_before_frequency_and_presence() {
        let mut p = Penalties::new(&params(1.25, -1.0, 0.5), &[]);
        p.record(0);
        p.record(0);
        let mut logits = [5.0f32, -2.0];
        p.apply(&mut logits);
        // 5 / 1.25 = 4, then 4 - (0.5 * 2 + (-1)) = 4; token 1 never seen.
        assert_eq!(logits, [4.0, -2.0]);
        let mut logits = [-4.0f32];
        p.apply(&mut logits);
        // -4 * 1.25 = -5, then -5 - 0 = -5.
        assert_eq!(logits, [-5.0]);
    }

    #[test]
    fn out_of_vocab_history_is_ignored() {
        let mut p = Penalties::new(&params(2.0, 1.0, 1.0), &[100]);
        p.record(200);
        let mut logits = [1.0f32, 2.0];
        p.apply(&mut logits);
        assert_eq!(logits, [1.0, 2.0]);
    }
}
