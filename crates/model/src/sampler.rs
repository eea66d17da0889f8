//! Token selection from one row of logits: greedy, or temperature with top-k / top-p / min-p
//! filters drawn from the request's own seeded ChaCha stream. Log-probabilities (chosen token and
//! top alternatives) come from a plain softmax over the raw logits, like llama.cpp's `n_probs`
//! with `post_sampling_probs` off, so they do not depend on the sampling filters.

use pagoda_core::SamplingParams;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// A token and its natural-log probability under the raw softmax.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TokenLogprob {
    pub token_id: u32,
    pub logprob: f32,
}

/// The sampler's choice for one position.
#[derive(Clone, Debug, PartialEq)]
pub struct Sampled {
    pub token_id: u32,
    /// Log-probability of `token_id` (only computed when logprobs were asked for, else NaN).
    pub logprob: f32,
    /// The most likely tokens, best first (empty unless asked for).
    pub top_logprobs: Vec<TokenLogprob>,
}

/// One request's sampler: its parameters and random stream.
pub struct Sampler {
    params: SamplingParams,
    rng: ChaCha8Rng,
    /// (logit, id) candidates reused across steps.
    candidates: Vec<(f32, u32)>,
}

impl Sampler {
    /// A sampler for `params`; the stream is seeded from `params.seed` (or `default_seed`).
    pub fn new(params: SamplingParams, default_seed: u64) -> Self {
        let rng = ChaCha8Rng::seed_from_u64(params.seed.unwrap_or(default_seed));
        Self {
            params,
            rng,
            candidates: Vec::new(),
        }
    }

    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// Picks the next token from `logits` (one row of the vocabulary).
    pub fn sample(&mut self, logits: &[f32]) -> Sampled {
        let token_id = if self.params.is_greedy() {
            argmax(logits)
        } else {
            self.sample_random(logits)
        };
        let (logprob, top_logprobs) = match self.params.logprobs {
            Some(k) => {
                let (lp, top) = logprobs(logits, token_id, k as usize);
                (lp, top)
            }
            None => (f32::NAN, Vec::new()),
        };
        Sampled {
            token_id,
            logprob,
            top_logprobs,
        }
    }

    fn sample_random(&mut self, logits: &[f32]) -> u32 {
        let p = &self.params;
        let c = &mut self.candidates;
        c.clear();
        c.extend(
            logits
                .iter()
                .enumerate()
                .filter(|(_, l)| !l.is_nan())
                .map(|(i, &l)| (l, i as u32)),
        );
        if c.is_empty() {
            return 0;
        }
        // Order: top-k, then temperature softmax, min-p, top-p (llama.cpp's default chain
        // order top_k -> top_p -> min_p -> temp differs only in where temperature applies to
        // min-p/top-p; vLLM applies temperature first, as here).
        let by_logit_desc =
            |a: &(f32, u32), b: &(f32, u32)| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1));
        if p.top_k > 0 && (p.top_k as usize) < c.len() {
            c.select_nth_unstable_by(p.top_k as usize - 1, by_logit_desc);
            c.truncate(p.top_k as usize);
        }
        // Only top-p needs the candidates in order; sorting Gemma's 262k logits on every step
        // would cost milliseconds, so temperature and min-p work on the unsorted list.
        let max = c.iter().fold(f32::NEG_INFINITY, |m, e| m.max(e.0));
        let mut sum = 0.0f64;
        for e in c.iter_mut() {
            e.0 = ((e.0 - max) / p.temperature).exp();
            sum += f64::from(e.0);
        }
        let inv = (1.0 / sum) as f32;
        for e in c.iter_mut() {
            e.0 *= inv;
        }
        if p.min_p > 0.0 {
            // The most likely token has probability exp(0) * inv, so it always survives.
            let floor = inv * p.min_p;
            c.retain(|e| e.0 >= floor);
        }
        if p.top_p < 1.0 {
            c.sort_unstable_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            let mut acc = 0.0f32;
            let mut keep = c.len();
            for (i, e) in c.iter().enumerate() {
                acc += e.0;
                if acc >= p.top_p {
                    keep = i + 1;
                    break;
                }
            }
            c.truncate(keep);
        }
        let total: f32 = c.iter().map(|e| e.0).sum();
        let mut r = self.rng.random::<f32>() * total;
        for e in c.iter() {
            if r < e.0 {
                return e.1;
            }
            r -= e.0;
        }
        c[c.len() - 1].1
    }
}

/// Index of the largest logit (the lowest index on ties, as llama.cpp's greedy sampler).
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &l) in logits.iter().enumerate() {
        if l > logits[best] {
            best = i;
        }
    }
    best as u32
}

/// Log-probability of `token_id` and the `k` most likely tokens (best first) under a plain
/// softmax over `logits`.
pub fn logprobs(logits: &[f32], token_id: u32, k: usize) -> (f32, Vec<TokenLogprob>) {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&l| f64::from(l - max).exp()).sum();
    let log_z = max + sum.ln() as f32;
    let mut top: Vec<(f32, u32)> = Vec::with_capacity(k + 1);
    if k > 0 {
        for (i, &l) in logits.iter().enumerate() {
            if top.len() < k || l > top[top.len() - 1].0 {
                let at = top.partition_point(|e| e.0 >= l);
                top.insert(at, (l, i as u32));
                top.truncate(k);
            }
        }
    }
    let chosen = logits
        .get(token_id as usize)
        .map_or(f32::NEG_INFINITY, |l| l - log_z);
    (
        chosen,
        top.into_iter()
            .map(|(l, id)| TokenLogprob {
                token_id: id,
                logprob: l - log_z,
            })
            .collect(),
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn greedy_picks_argmax_and_reports_softmax_logprobs() {
        let logits = [1.0f32, 3.0, 2.0, 3.0];
        let mut s = Sampler::new(
            SamplingParams {
                logprobs: Some(2),
                ..SamplingParams::greedy(1)
            },
            0,
        );
        let out = s.sample(&logits);
        assert_eq!(out.token_id, 1);
        let z: f32 = logits.iter().map(|l| l.exp()).sum();
        assert!((out.logprob - (3.0f32.exp() / z).ln()).abs() < 1e-6);
        assert_eq!(
            out.top_logprobs
                .iter()
                .map(|t| t.token_id)
                .collect::<Vec<_>>(),
            vec![1, 3]
        );
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
        let draw = |p: &SamplingParams| {
            let mut s = Sampler::new(p.clone(), 0);
            (0..200)
                .map(|_| s.sample(&logits).token_id)
                .collect::<Vec<_>>()
        };
        let a = draw(&params);
        assert_eq!(a, draw(&params));
        let mut top5: Vec<u32> = (0..100).collect();
        top5.sort_by(|&x, &y| logits[y as usize].total_cmp(&logits[x as usize]));
        top5.truncate(5);
        assert!(a.iter().all(|t| top5.contains(t)));
        // Different seeds give different streams.
        assert_ne!(
            a,
            draw(&SamplingParams {
                seed: Some(43),
                ..params.clone()
            })
        );
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
            let mut s = Sampler::new(params, 0);
            let drawn: Vec<u32> = (0..500).map(|_| s.sample(&logits).token_id).collect();
            assert!(drawn.iter().all(|&t| t == 1 || t == 3), "{drawn:?}");
            assert!(drawn.contains(&1) && drawn.contains(&3));
        }
    }
}
