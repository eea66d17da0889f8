//! Token selection from one row of logits. Per request the sampler applies, in vLLM's order,
//! `logit_bias`, the structured-output mask (disallowed ids to -inf), the `min_tokens` ban on
//! stop ids, the repetition penalty and the presence / frequency penalties, then picks greedily
//! or by temperature with top-k / min-p / top-p filters from the request's own seeded ChaCha
//! stream. Log-probabilities come from the raw logits (before bias, mask and penalties).

mod constraint;
mod distribution;
mod logprobs;
mod penalties;
mod random;
mod rejection;
mod select;

pub(crate) use distribution::{draw_from, processed_probs};

pub use logprobs::{position_logprobs, prompt_logprobs};
pub use pagoda_core::{PositionLogprobs, TokenLogprob};

use pagoda_core::{ConstraintError, ConstraintState, SamplingParams};
use pagoda_kernels::ops::{find_greater, max_ignoring_nan};
use penalties::Penalties;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use random::{Scratch, sample_random};

/// The sampler's choice for one position.
#[derive(Clone, Debug, PartialEq)]
pub struct Sampled {
    pub token_id: u32,
    /// Log-probability of `token_id` under the raw softmax (NaN unless logprobs were asked for).
    pub logprob: f32,
    /// 1-based rank of `token_id` under the raw softmax (0 unless logprobs were asked for).
    pub rank: u32,
    /// The most likely tokens under the raw softmax, best first (empty unless asked for).
    pub top_logprobs: Vec<TokenLogprob>,
}

impl Sampled {
    /// The position's log-probability record, or `None` when logprobs were not asked for.
    pub fn position_logprobs(&self) -> Option<PositionLogprobs> {
        (self.rank > 0).then(|| PositionLogprobs {
            token_id: self.token_id,
            logprob: self.logprob,
            rank: self.rank,
            top: self.top_logprobs.clone(),
        })
    }
}

/// One request's sampler: its parameters, random stream and token history.
#[derive(Clone, Debug)]
pub struct Sampler {
    params: SamplingParams,
    rng: ChaCha8Rng,
    /// Buffers of the random draw, reused across steps.
    scratch: Scratch,
    /// The adjusted copy of the logits, written only on steps where some adjustment applies.
    adjusted: Vec<f32>,
    penalties: Penalties,
    /// Ids banned until `min_tokens` tokens were generated (empty when `min_tokens` is 0).
    min_tokens_banned: Vec<u32>,
    num_generated: u32,
    /// The structured-output grammar state, when the request has a constraint.
    constraint: Option<Box<dyn ConstraintState>>,
    /// The target's distribution and its scratch, for verifying a draft model's proposals.
    probs: Vec<f32>,
    candidates: Vec<(f32, u32)>,
}

impl Sampler {
    /// A sampler without prompt context: the repetition penalty sees only generated tokens and
    /// `min_tokens` bans only `stop_token_ids`. The stream is seeded from `params.seed` (or
    /// `default_seed`).
    pub fn new(params: SamplingParams, default_seed: u64) -> Self {
        Self::with_context(params, default_seed, &[], &[])
    }

    /// A sampler for a request with `prompt`, on a model whose end-of-generation ids are
    /// `eog_ids` (banned, with `stop_token_ids`, until `min_tokens` tokens were generated).
    pub fn with_context(
        params: SamplingParams,
        default_seed: u64,
        prompt: &[u32],
        eog_ids: &[u32],
    ) -> Self {
        let rng = ChaCha8Rng::seed_from_u64(params.seed.unwrap_or(default_seed));
        let mut min_tokens_banned = Vec::new();
        if params.min_tokens > 0 {
            min_tokens_banned.extend(&params.stop_token_ids);
            // As vLLM: with `ignore_eos` the EOG ids do not stop generation, so nothing to hold
            // back (vllm/v1/sample/logits_processor MinTokensLogitsProcessor uses stop ids).
            if !params.ignore_eos {
                min_tokens_banned.extend(eog_ids);
            }
        }
        Self {
            penalties: Penalties::new(&params, prompt),
            params,
            rng,
            scratch: Scratch::default(),
            adjusted: Vec::new(),
            min_tokens_banned,
            num_generated: 0,
            constraint: None,
            probs: Vec::new(),
            candidates: Vec::new(),
        }
    }

    /// This sampler with every choice restricted to what `state` allows. When the grammar is
    /// finished the sampler emits the state's EOS, whatever the logits say.
    pub fn with_constraint(mut self, state: Box<dyn ConstraintState>) -> Self {
        self.constraint = Some(state);
        self
    }

    /// The grammar state, when the request has a constraint.
    pub fn constraint(&self) -> Option<&dyn ConstraintState> {
        self.constraint.as_deref()
    }

    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// How many tokens this sampler has chosen so far.
    pub fn num_generated(&self) -> u32 {
        self.num_generated
    }

    /// Picks the next token from `logits` (one row of the vocabulary) and records it. Fails
    /// only when the constraint's matcher fails (a grammar limit hit, or an internal error).
    pub fn sample(&mut self, logits: &[f32]) -> Result<Sampled, ConstraintError> {
        if let Some(m) = &mut self.constraint
            && m.is_finished()
        {
            // The grammar admits nothing more: end the sequence (finish reason `stop`).
            let eos = m.eos_token();
            m.consume(eos)?;
            return Ok(self.record(logits, eos));
        }
        let scores: &[f32] = if self.adjust(logits)? {
            &self.adjusted
        } else {
            logits
        };
        let token_id = if self.params.is_greedy() {
            argmax(scores)
        } else {
            sample_random(&self.params, &mut self.rng, &mut self.scratch, scores)
        };
        if let Some(m) = &mut self.constraint {
            debug_assert!(
                scores
                    .get(token_id as usize)
                    .is_some_and(|l| *l > f32::NEG_INFINITY),
                "sampled token {token_id} is outside the grammar's mask"
            );
            m.consume(token_id)?;
        }
        Ok(self.record(logits, token_id))
    }

    /// Applies bias, grammar mask, the `min_tokens` ban and penalties to a copy of `logits` in
    /// `self.adjusted`; false (nothing copied) when none of them applies.
    fn adjust(&mut self, logits: &[f32]) -> Result<bool, ConstraintError> {
        let banning = self.num_generated < self.params.min_tokens;
        let adjust = (banning && !self.min_tokens_banned.is_empty())
            || !self.params.logit_bias.is_empty()
            || self.penalties.is_active()
            || self.constraint.is_some();
        if adjust {
            // One copy of the row; the adjustments below touch only the ids they name.
            self.adjusted.clear();
            self.adjusted.extend_from_slice(logits);
            for &(id, bias) in &self.params.logit_bias {
                if let Some(l) = self.adjusted.get_mut(id as usize) {
                    *l += bias;
                }
            }
            if let Some(m) = &mut self.constraint {
                m.apply_mask(&mut self.adjusted)?;
                if banning {
                    constraint::ban_unless_nothing_left(
                        &mut self.adjusted,
                        &self.min_tokens_banned,
                    );
                }
            } else if banning {
                for &id in &self.min_tokens_banned {
                    if let Some(l) = self.adjusted.get_mut(id as usize) {
                        *l = f32::NEG_INFINITY;
                    }
                }
            }
            self.penalties.apply(&mut self.adjusted);
        }
        Ok(adjust)
    }

    /// Verifies a draft model's proposal `x`, drawn from `q` (one probability per id): accepts
    /// it with probability min(1, p(x) / q(x)), p being the distribution `sample` would draw
    /// from here (adjustments included), else draws from max(p - q, 0) renormalised; either
    /// way the token is recorded as chosen and is distributed as p. A `q` shorter than the
    /// vocabulary (a draft with a narrowed head) is zero past its end. Greedy requests, a
    /// finished grammar and an empty or too long `q` take `sample`'s own draw instead
    /// (accepted when it equals `x`), which is exact for any proposal.
    pub fn verify_draft(
        &mut self,
        logits: &[f32],
        x: u32,
        q: &[f32],
    ) -> Result<(Sampled, bool), ConstraintError> {
        let forced = self.constraint.as_ref().is_some_and(|m| m.is_finished());
        if self.params.is_greedy() || forced || q.is_empty() || q.len() > logits.len() {
            let s = self.sample(logits)?;
            let accepted = s.token_id == x;
            return Ok((s, accepted));
        }
        let scores: &[f32] = if self.adjust(logits)? {
            &self.adjusted
        } else {
            logits
        };
        processed_probs(&self.params, scores, &mut self.candidates, &mut self.probs);
        let rng = &mut self.rng;
        let u_accept = rng.random::<f64>();
        let (token_id, accepted) =
            rejection::accept_or_resample(&self.probs, q, x, u_accept, || rng.random::<f64>());
        if let Some(m) = &mut self.constraint {
            m.consume(token_id)?;
        }
        Ok((self.record(logits, token_id), accepted))
    }

    /// Records `token_id` as chosen and reports it with the raw logits' log-probabilities.
    fn record(&mut self, logits: &[f32], token_id: u32) -> Sampled {
        self.penalties.record(token_id);
        self.num_generated = self.num_generated.saturating_add(1);
        match self.params.logprobs {
            Some(k) => {
                let p = position_logprobs(logits, token_id, k as usize);
                Sampled {
                    token_id,
                    logprob: p.logprob,
                    rank: p.rank,
                    top_logprobs: p.top,
                }
            }
            None => Sampled {
                token_id,
                logprob: f32::NAN,
                rank: 0,
                top_logprobs: Vec::new(),
            },
        }
    }
}

/// Index of the largest logit (the lowest index on ties, as llama.cpp's greedy sampler); NaN
/// entries are skipped, and a row with nothing above -inf gives 0.
pub fn argmax(logits: &[f32]) -> u32 {
    let max = max_ignoring_nan(logits);
    // The first entry above the float just below the max is the first entry equal to it.
    find_greater(logits, max.next_down()).map_or(0, |i| i as u32)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn greedy_with(edit: impl FnOnce(&mut SamplingParams)) -> SamplingParams {
        let mut p = SamplingParams::greedy(16);
        edit(&mut p);
        p
    }

    fn draw(s: &mut Sampler, logits: &[f32], n: usize) -> Vec<u32> {
        (0..n).map(|_| s.sample(logits).unwrap().token_id).collect()
    }

    #[test]
    fn greedy_picks_argmax_and_reports_softmax_logprobs() {
        let logits = [1.0f32, 3.0, 2.0, 3.0];
        let mut s = Sampler::new(greedy_with(|p| p.logprobs = Some(2)), 0);
        let out = s.sample(&logits).unwrap();
        assert_eq!(out.token_id, 1);
        assert_eq!(out.rank, 1);
        let z: f32 = logits.iter().map(|l| l.exp()).sum();
        assert!((out.logprob - (3.0f32.exp() / z).ln()).abs() < 1e-6);
        assert_eq!(
            out.top_logprobs
                .iter()
                .map(|t| t.token_id)
                .collect::<Vec<_>>(),
            vec![1, 3]
        );
        let pos = out.position_logprobs().unwrap();
        assert_eq!((pos.token_id, pos.rank), (1, 1));
        assert_eq!(pos.logprob, out.logprob);
        assert_eq!(pos.top, out.top_logprobs);
    }

    #[test]
    fn argmax_takes_the_first_max_and_skips_nan() {
        let mut row: Vec<f32> = (0..1000).map(|i| (i as f32 * 0.1).sin()).collect();
        row[0] = f32::NAN;
        row[700] = 5.0;
        row[300] = 5.0;
        row[900] = f32::INFINITY;
        assert_eq!(argmax(&row), 900);
        row[900] = f32::NAN;
        assert_eq!(argmax(&row), 300);
        assert_eq!(argmax(&[f32::NAN, f32::NEG_INFINITY]), 0);
        assert_eq!(argmax(&[f32::NEG_INFINITY, f32::NAN, -1e30]), 2);
        assert_eq!(argmax(&[]), 0);
    }

    #[test]
    fn no_logprobs_means_no_position_record() {
        let mut s = Sampler::new(SamplingParams::greedy(1), 0);
        let out = s.sample(&[0.0, 1.0]).unwrap();
        assert_eq!((out.rank, out.top_logprobs.len()), (0, 0));
        assert!(out.logprob.is_nan());
        assert_eq!(out.position_logprobs(), None);
    }

    #[test]
    fn rank_of_a_sampled_token_is_its_place_under_the_raw_softmax() {
        let logits: Vec<f32> = (0..40).map(|i| (i as f32 * 0.83).sin() * 3.0).collect();
        let mut order: Vec<u32> = (0..40).collect();
        order.sort_by(|&a, &b| logits[b as usize].total_cmp(&logits[a as usize]));
        let params = SamplingParams {
            temperature: 1.5,
            seed: Some(7),
            logprobs: Some(0),
            ..Default::default()
        };
        let mut s = Sampler::new(params, 0);
        let mut ranks = Vec::new();
        for _ in 0..100 {
            let out = s.sample(&logits).unwrap();
            let expected = order.iter().position(|&t| t == out.token_id).unwrap() + 1;
            assert_eq!(out.rank as usize, expected);
            assert!(out.top_logprobs.is_empty());
            ranks.push(out.rank);
        }
        assert!(ranks.iter().any(|&r| r > 1), "{ranks:?}");
    }

    #[test]
    fn seeded_sampling_is_reproducible_and_respects_top_k() {
        let logits: Vec<f32> = (0..100).map(|i| (i as f32 * 0.37).sin()).collect();
        let params = SamplingParams {
            temperature: 1.0,
            top_k: 5,
            seed: Some(42),
            ..Default::default()
        };
        let run = |p: &SamplingParams| draw(&mut Sampler::new(p.clone(), 0), &logits, 200);
        let a = run(&params);
        assert_eq!(a, run(&params));
        let mut top5: Vec<u32> = (0..100).collect();
        top5.sort_by(|&x, &y| logits[y as usize].total_cmp(&logits[x as usize]));
        top5.truncate(5);
        assert!(a.iter().all(|t| top5.contains(t)));
        // Different seeds give different streams.
        let other = SamplingParams {
            seed: Some(43),
            ..params.clone()
        };
        assert_ne!(a, run(&other));
    }

    /// Streams drawn by the sampler before penalties existed (same logits, seed 42); a seeded
    /// request must keep its output when it uses none of the new features.
    #[test]
    fn seeded_stream_is_unchanged_without_new_features() {
        let logits: Vec<f32> = (0..50).map(|i| (i as f32 * 0.61).cos() * 2.0).collect();
        let cases = [
            (
                SamplingParams {
                    seed: Some(42),
                    ..Default::default()
                },
                [10, 31, 8, 42, 35, 20, 13, 30, 32, 11, 31, 8],
            ),
            (
                SamplingParams {
                    seed: Some(42),
                    temperature: 0.7,
                    top_k: 10,
                    top_p: 0.9,
                    min_p: 0.05,
                    ..Default::default()
                },
                [31, 20, 31, 30, 11, 10, 41, 20, 11, 41, 20, 31],
            ),
        ];
        for (params, before) in cases {
            let plain = draw(&mut Sampler::new(params.clone(), 0), &logits, 12);
            assert_eq!(plain, before);
            let prompt: Vec<u32> = (0..50).collect();
            let mut ctx = Sampler::with_context(params, 0, &prompt, &[10, 31]);
            assert_eq!(draw(&mut ctx, &logits, 12), before);
            // No feature on: the logits were never copied.
            assert_eq!(ctx.adjusted.capacity(), 0);
        }
    }

    #[test]
    fn logit_bias_forces_and_bans_tokens_but_not_the_logprobs() {
        let logits = [1.0f32, 5.0, 2.0, 4.9];
        let forced = greedy_with(|p| {
            p.logit_bias = vec![(2, 100.0)];
            p.logprobs = Some(1);
        });
        let out = Sampler::new(forced, 0).sample(&logits).unwrap();
        assert_eq!(out.token_id, 2);
        // Log-probabilities stay those of the raw logits.
        let raw = position_logprobs(&logits, 2, 1);
        assert_eq!((out.logprob, out.rank), (raw.logprob, 3));
        assert_eq!(out.top_logprobs[0].token_id, 1);

        let banned = SamplingParams {
            temperature: 1.0,
            seed: Some(3),
            logit_bias: vec![(1, -100.0), (3, -100.0)],
            ..Default::default()
        };
        let drawn = draw(&mut Sampler::new(banned, 0), &logits, 300);
        assert!(drawn.iter().all(|&t| t == 0 || t == 2), "{drawn:?}");
        assert!(drawn.contains(&0) && drawn.contains(&2));
    }

    #[test]
    fn min_tokens_bans_eog_and_stop_ids_then_releases_them() {
        // EOG id 3 is the favourite, stop id 2 the runner-up.
        let logits = [1.0f32, 2.0, 3.0, 4.0];
        let params = greedy_with(|p| {
            p.min_tokens = 2;
            p.stop_token_ids = vec![2];
        });
        let mut s = Sampler::with_context(params.clone(), 0, &[], &[3]);
        assert_eq!(draw(&mut s, &logits, 4), vec![1, 1, 3, 3]);
        assert_eq!(s.num_generated(), 4);
        // Without context only the stop ids are known.
        let mut s = Sampler::new(params.clone(), 0);
        assert_eq!(draw(&mut s, &logits, 3), vec![3, 3, 3]);
        // With ignore_eos the EOG id does not end generation, so it is not held back.
        let ignoring = SamplingParams {
            ignore_eos: true,
            ..params.clone()
        };
        let mut s = Sampler::with_context(ignoring, 0, &[], &[3]);
        assert_eq!(draw(&mut s, &logits, 2), vec![3, 3]);
        // Random sampling never draws a banned id either.
        let random = SamplingParams {
            temperature: 1.0,
            seed: Some(9),
            min_tokens: 50,
            max_tokens: 50,
            ..params
        };
        let mut s = Sampler::with_context(random, 0, &[], &[3]);
        let drawn = draw(&mut s, &logits, 50);
        assert!(drawn.iter().all(|&t| t < 2), "{drawn:?}");
        assert!(drawn.contains(&0) && drawn.contains(&1));
        assert!(
            draw(&mut s, &logits, 100).contains(&3),
            "released after min_tokens"
        );
    }

    #[test]
    fn frequency_penalty_grows_with_each_repeat() {
        // Step by step: [2.0, 1.9] -> 0; 0 at 1.5 -> 1; 1 at 1.4 -> 0; 0 at 1.0 -> 1; ...
        let params = greedy_with(|p| p.frequency_penalty = 0.5);
        let mut s = Sampler::new(params, 0);
        assert_eq!(draw(&mut s, &[2.0, 1.9], 5), vec![0, 1, 0, 1, 0]);
    }

    #[test]
    fn presence_penalty_applies_once_per_token() {
        // [2.0, 1.5, 1.2], presence 1: 0; 0 at 1.0 -> 1; 1 at 0.5 -> 2; 2 at 0.2 -> 0; then 0
        // stays at 1.0, above the others, because presence does not grow with the count.
        let params = greedy_with(|p| p.presence_penalty = 1.0);
        let mut s = Sampler::new(params, 0);
        assert_eq!(draw(&mut s, &[2.0, 1.5, 1.2], 6), vec![0, 1, 2, 0, 0, 0]);
    }

    #[test]
    fn repetition_penalty_covers_the_prompt_and_the_output() {
        let params = greedy_with(|p| p.repetition_penalty = 2.0);
        // Prompt token 0: 3.0 / 2 = 1.5 < 2.0 -> 1; then 1 at 1.0 < 1.5 -> 0; 0 stays at 1.5
        // (the penalty applies once, not per occurrence) -> 0.
        let mut s = Sampler::with_context(params.clone(), 0, &[0, 0, 0], &[]);
        assert_eq!(draw(&mut s, &[3.0, 2.0, -1.0], 3), vec![1, 0, 0]);
        // Negative logits are multiplied: -1 * 2 = -2 < -1.5 -> 1.
        let mut s = Sampler::with_context(params.clone(), 0, &[0], &[]);
        assert_eq!(s.sample(&[-1.0, -1.5]).unwrap().token_id, 1);
        // Without context only generated tokens count: 0 first, then 0 at 1.5 < 2 -> 1.
        let mut s = Sampler::new(params, 0);
        assert_eq!(draw(&mut s, &[3.0, 2.0], 2), vec![0, 1]);
    }

    #[test]
    fn min_p_and_top_p_cut_the_tail() {
        // Unsorted on purpose: only top-p sorts the candidates.
        let logits = [0.0f32, 10.0, -1.0, 9.0];
        for params in [
            SamplingParams {
                temperature: 1.0,
                min_p: 0.1,
                seed: Some(1),
                ..Default::default()
            },
            SamplingParams {
                temperature: 1.0,
                top_p: 0.9,
                seed: Some(1),
                ..Default::default()
            },
        ] {
            let drawn = draw(&mut Sampler::new(params, 0), &logits, 500);
            assert!(drawn.iter().all(|&t| t == 1 || t == 3), "{drawn:?}");
            assert!(drawn.contains(&1) && drawn.contains(&3));
        }
    }
}
