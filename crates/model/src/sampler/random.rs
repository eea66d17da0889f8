//! Random sampling from the temperature softmax after top-k, min-p and top-p, without touching
//! the whole vocabulary more than a few vectorised passes. The chain is applied to a short
//! candidate list wherever one exists (top-k; the min-p floor, known before any exp; the
//! nucleus, after a cheap prefilter); plain temperature draws straight from the row.

use pagoda_core::SamplingParams;
use pagoda_kernels::ops::{exp_into, exp_sum, find_greater, max_ignoring_nan};
use rand::RngExt;
use rand_chacha::ChaCha8Rng;

use super::select::{above, by_score_desc, top_k};

/// Row length of one block of the plain-temperature draw: the draw sums each block's
/// exponentials once, then recomputes only the block the random number falls in.
const BLOCK: usize = 512;

/// Reusable buffers of one sampler.
#[derive(Clone, Debug, Default)]
pub(super) struct Scratch {
    /// `(score, id)`, then `(probability, id)`, candidates.
    candidates: Vec<(f32, u32)>,
    /// Sum of the exponentials of each `BLOCK` of the row.
    block_sums: Vec<f64>,
}

/// Draws from the temperature softmax of `scores` after top-k, min-p and top-p. Banned (-inf)
/// and NaN scores are never drawn; when every score is, the result is 0.
pub(super) fn sample_random(
    p: &SamplingParams,
    rng: &mut ChaCha8Rng,
    s: &mut Scratch,
    scores: &[f32],
) -> u32 {
    let c = &mut s.candidates;
    // Order: top-k, then temperature softmax, min-p, top-p (llama.cpp's default chain
    // order top_k -> top_p -> min_p -> temp differs only in where temperature applies to
    // min-p/top-p; vLLM applies temperature first, as here).
    if p.top_k > 0 {
        top_k(scores, p.top_k as usize, c);
        return finish(p, rng, c, None);
    }
    let max = max_ignoring_nan(scores);
    if max == f32::NEG_INFINITY {
        return 0;
    }
    if max == f32::INFINITY {
        // The softmax's limit: all mass on the infinite scores; take the first.
        return find_greater(scores, f32::MAX).map_or(0, |i| i as u32);
    }
    let inv_t = 1.0 / p.temperature;
    if p.min_p > 0.0 {
        // p_i >= min_p * p_max  <=>  (l_i - max) / T >= ln(min_p): the survivors are known
        // before any exp. The margin keeps rounding from losing one; `finish` applies the
        // exact test to what is collected.
        let margin = p.temperature * 1e-3 + max.abs() * 1e-6;
        above(scores, max + p.temperature * p.min_p.ln() - margin, c);
        // Top-p counts mass against the softmax over every candidate, not just the survivors.
        // The collected max is the row's, so these exponentials match `exp_sum`'s.
        let z = (p.top_p < 1.0).then(|| {
            exponentiate(p, c);
            exp_sum(scores, max, inv_t)
        });
        return finish(p, rng, c, z);
    }
    if p.top_p < 1.0 {
        // Prefilter: everything within 6 temperatures of the max (e^-6 = 0.25% of the top
        // token's probability each). When that holds less than the nucleus (a flat row),
        // take every candidate.
        let z = exp_sum(scores, max, inv_t);
        above(scores, max - 6.0 * p.temperature, c);
        let kept = exponentiate(p, c);
        // Room for `finish`'s f32 accumulation to reach top_p inside the prefilter.
        if kept < (f64::from(p.top_p) + 1e-3) * z {
            above(scores, f32::NEG_INFINITY, c);
            exponentiate(p, c);
        }
        return finish(p, rng, c, Some(z));
    }
    draw_dense(rng, &mut s.block_sums, scores, max, inv_t)
}

/// Turns `c`'s scores into `exp((score - max) / T)`, max over `c`, and returns their sum.
fn exponentiate(p: &SamplingParams, c: &mut [(f32, u32)]) -> f64 {
    let max = c.iter().fold(f32::NEG_INFINITY, |m, e| m.max(e.0));
    let mut sum = 0.0f64;
    for e in c.iter_mut() {
        e.0 = ((e.0 - max) / p.temperature).exp();
        sum += f64::from(e.0);
    }
    sum
}

/// The chain on a candidate list `c` of `(score, id)` (or of exponentials, as
/// [`exponentiate`] leaves them, when `z` is given): temperature softmax, min-p, top-p, draw.
/// The softmax normalises by `z` (the exponentials' sum over the whole row, when `c` is only a
/// prefilter of it) or else by `c`'s own sum. The draw walks `c` in its order.
fn finish(
    p: &SamplingParams,
    rng: &mut ChaCha8Rng,
    c: &mut Vec<(f32, u32)>,
    z: Option<f64>,
) -> u32 {
    if c.is_empty() {
        return 0;
    }
    let inv = match z {
        Some(z) => (1.0 / z) as f32,
        None => (1.0 / exponentiate(p, c)) as f32,
    };
    for e in c.iter_mut() {
        e.0 *= inv;
    }
    if p.min_p > 0.0 {
        // The most likely token has probability exp(0) * inv, so it always survives.
        let floor = inv * p.min_p;
        c.retain(|e| e.0 >= floor);
    }
    if p.top_p < 1.0 {
        nucleus(c, p.top_p);
    }
    let total: f32 = c.iter().map(|e| e.0).sum();
    let mut r = rng.random::<f32>() * total;
    for e in c.iter() {
        if r < e.0 {
            return e.1;
        }
        r -= e.0;
    }
    c[c.len() - 1].1
}

/// Cuts `c` (probabilities) to its best-first prefix whose f32 running sum first reaches
/// `top_p` (all of it when none does), sorted best first. Same result as sorting all of `c`,
/// but only the prefix (and one chunk past it) gets sorted: a flat row has a huge tail.
fn nucleus(c: &mut Vec<(f32, u32)>, top_p: f32) {
    let mut acc = 0.0f32;
    let mut done = 0;
    let mut chunk = 64;
    let len = c.len();
    while done < len {
        let end = (done + chunk).min(len);
        let rest = &mut c[done..];
        if end < len {
            // The best `end - done` of the rest, to the front (unsorted); then sort just those.
            rest.select_nth_unstable_by(end - done - 1, by_score_desc);
        }
        rest[..end - done].sort_unstable_by(by_score_desc);
        for i in done..end {
            acc += c[i].0;
            if acc >= top_p {
                c.truncate(i + 1);
                return;
            }
        }
        done = end;
        chunk *= 2;
    }
}

/// Plain temperature: draws `r` in [0, sum of exps) and returns the first id whose running
/// sum passes it, in id order, as `finish` would on the whole row, but from block sums and
/// one recomputed block instead of a 262k-entry candidate list. `max` is the row's finite max.
fn draw_dense(
    rng: &mut ChaCha8Rng,
    block_sums: &mut Vec<f64>,
    scores: &[f32],
    max: f32,
    inv_t: f32,
) -> u32 {
    block_sums.clear();
    block_sums.extend(scores.chunks(BLOCK).map(|b| exp_sum(b, max, inv_t)));
    let total: f64 = block_sums.iter().sum();
    let r = f64::from(rng.random::<f32>()) * total;
    let mut acc = 0.0f64;
    // Rounding can leave `r` past the last positive term; then the last one is drawn.
    let mut fallback = None;
    for (b, &sum) in block_sums.iter().enumerate() {
        if sum <= 0.0 {
            continue;
        }
        if acc + sum <= r {
            acc += sum;
            fallback = Some(b);
            continue;
        }
        return pick_in_block(scores, b, max, inv_t, r - acc).0;
    }
    match fallback {
        Some(b) => pick_in_block(scores, b, max, inv_t, f64::INFINITY).1,
        // `max` is finite, so its block has a positive sum.
        None => 0,
    }
}

/// Within block `b`: the first id whose running sum of exps passes `r`, and the last id with
/// a positive exp (the answer when rounding leaves `r` past the block's end).
fn pick_in_block(scores: &[f32], b: usize, max: f32, inv_t: f32, r: f64) -> (u32, u32) {
    let start = b * BLOCK;
    let row = &scores[start..(start + BLOCK).min(scores.len())];
    let mut e = [0.0f32; BLOCK];
    let e = &mut e[..row.len()];
    exp_into(row, max, inv_t, e);
    let mut acc = 0.0f64;
    let mut last = None;
    for (i, &v) in e.iter().enumerate() {
        if v > 0.0 {
            acc += f64::from(v);
            last = Some(i);
            if acc > r {
                return ((start + i) as u32, (start + i) as u32);
            }
        }
    }
    let last = last.map_or(start, |i| start + i) as u32;
    (last, last)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    /// The chain's final distribution the slow way: every candidate, f64, fully sorted.
    fn reference(p: &SamplingParams, scores: &[f32]) -> Vec<f64> {
        let mut c: Vec<(f32, u32)> = scores
            .iter()
            .enumerate()
            .filter(|(_, l)| **l > f32::NEG_INFINITY)
            .map(|(i, &l)| (l, i as u32))
            .collect();
        c.sort_by(by_score_desc);
        if p.top_k > 0 {
            c.truncate(p.top_k as usize);
        }
        let max = f64::from(c[0].0);
        let t = f64::from(p.temperature);
        let e: Vec<f64> = c
            .iter()
            .map(|x| ((f64::from(x.0) - max) / t).exp())
            .collect();
        let z: f64 = e.iter().sum();
        let mut keep = c.len();
        // f32 running sum, as the sampler's: the cut must land on the same id.
        let mut acc = 0.0f32;
        for (i, &v) in e.iter().enumerate() {
            if p.min_p > 0.0 && v < f64::from(p.min_p) {
                keep = keep.min(i);
            }
            acc += (v / z) as f32;
            if p.top_p < 1.0 && acc >= p.top_p {
                keep = keep.min(i + 1);
            }
        }
        let kept: f64 = e[..keep].iter().sum();
        let mut probs = vec![0.0; scores.len()];
        for (x, &v) in c[..keep].iter().zip(&e) {
            probs[x.1 as usize] = v / kept;
        }
        probs
    }

    /// A peaky row over 1200 ids, with banned and NaN entries sprinkled in.
    fn row() -> Vec<f32> {
        (0..1200)
            .map(|i| match i % 101 {
                7 => f32::NEG_INFINITY,
                8 => f32::NAN,
                _ if i % 211 == 3 => 6.0 + (i as f32 * 0.01).sin(),
                _ => (i as f32 * 0.377).sin() * 2.0,
            })
            .collect()
    }

    #[test]
    fn every_path_draws_from_the_reference_distribution() {
        let scores = row();
        let base = SamplingParams {
            temperature: 1.0,
            ..Default::default()
        };
        let cases = [
            base.clone(),
            SamplingParams {
                temperature: 0.7,
                top_k: 20,
                ..base.clone()
            },
            SamplingParams {
                min_p: 0.05,
                ..base.clone()
            },
            SamplingParams {
                top_p: 0.8,
                ..base.clone()
            },
            SamplingParams {
                temperature: 1.3,
                top_p: 0.9,
                min_p: 0.02,
                ..base.clone()
            },
            // A flat row: the nucleus prefilter falls back to every candidate.
            SamplingParams {
                temperature: 20.0,
                top_p: 0.5,
                ..base
            },
        ];
        const N: usize = 10_000;
        for p in cases {
            let want = reference(&p, &scores);
            let mut rng = ChaCha8Rng::seed_from_u64(5);
            let mut s = Scratch::default();
            let mut counts = vec![0usize; scores.len()];
            for _ in 0..N {
                counts[sample_random(&p, &mut rng, &mut s, &scores) as usize] += 1;
            }
            for (id, (&n, &q)) in counts.iter().zip(&want).enumerate() {
                if q == 0.0 {
                    assert_eq!(n, 0, "{p:?}: id {id} is outside the distribution");
                    continue;
                }
                let f = n as f64 / N as f64;
                let tol = 5.0 * (q * (1.0 - q) / N as f64).sqrt() + 1e-4;
                assert!((f - q).abs() <= tol, "{p:?}: id {id} drawn {f}, want {q}");
            }
        }
    }

    #[test]
    fn rows_with_nothing_drawable_give_zero_and_infinity_wins() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut s = Scratch::default();
        let p = SamplingParams::default();
        let dead = [f32::NAN, f32::NEG_INFINITY, f32::NAN];
        assert_eq!(sample_random(&p, &mut rng, &mut s, &dead), 0);
        let inf = [1.0, f32::NAN, f32::INFINITY, 3.0, f32::INFINITY];
        assert_eq!(sample_random(&p, &mut rng, &mut s, &inf), 2);
    }

    #[test]
    fn nucleus_matches_a_full_sort() {
        let mut probs: Vec<(f32, u32)> = (0..5000u32)
            .map(|i| (((i * 7919) % 5000) as f32 + 1.0, i))
            .collect();
        let total: f32 = probs.iter().map(|e| e.0).sum();
        for e in &mut probs {
            e.0 /= total;
        }
        for top_p in [0.001f32, 0.3, 0.9, 0.999, 1.5] {
            let mut want = probs.clone();
            want.sort_by(by_score_desc);
            let mut acc = 0.0f32;
            let keep = want
                .iter()
                .position(|e| {
                    acc += e.0;
                    acc >= top_p
                })
                .map_or(want.len(), |i| i + 1);
            want.truncate(keep);
            let mut got = probs.clone();
            nucleus(&mut got, top_p);
            assert_eq!(got, want, "top_p {top_p}");
        }
    }
}
