//! The distribution a sampled request draws from, written out as numbers: the temperature
//! softmax after top-k, min-p and top-p, in `random.rs`'s order. Speculative verification
//! against a draft model needs p and q themselves, not just one draw from each.

use pagoda_core::SamplingParams;

use super::select::{above, by_score_desc, top_k};

/// Writes into `out` (one entry per id of `scores`) the probability with which a sampled
/// request with `p` draws each id: the softmax of `scores / T` over the top-k candidates (or
/// every finite score), those below `min_p` times the best dropped, then the best-first
/// prefix reaching `top_p`, renormalised. All zeros when no score is drawable. `c` is scratch.
pub(crate) fn processed_probs(
    p: &SamplingParams,
    scores: &[f32],
    c: &mut Vec<(f32, u32)>,
    out: &mut Vec<f32>,
) {
    out.clear();
    out.resize(scores.len(), 0.0);
    if p.top_k > 0 {
        top_k(scores, p.top_k as usize, c);
    } else {
        above(scores, f32::NEG_INFINITY, c);
    }
    let Some(max) = c.iter().map(|e| e.0).reduce(f32::max) else {
        return;
    };
    if max == f32::INFINITY {
        // The softmax's limit, as the draw takes it: everything on the first infinite score.
        if let Some(e) = c.iter().filter(|e| e.0 == max).min_by_key(|e| e.1) {
            out[e.1 as usize] = 1.0;
        }
        return;
    }
    // Probabilities in f64: the acceptance ratio p/q of a rare token must not round to 0.
    let mut probs: Vec<(f64, u32)> = c
        .iter()
        .map(|e| ((f64::from(e.0 - max) / f64::from(p.temperature)).exp(), e.1))
        .collect();
    let z: f64 = probs.iter().map(|e| e.0).sum();
    for e in &mut probs {
        e.0 /= z;
    }
    if p.min_p > 0.0 {
        // The best token has probability 1 / z.
        let floor = f64::from(p.min_p) / z;
        probs.retain(|e| e.0 >= floor);
    }
    if p.top_p < 1.0 {
        probs.sort_unstable_by(|a, b| by_score_desc(&(a.0 as f32, a.1), &(b.0 as f32, b.1)));
        let mut acc = 0.0;
        let keep = probs
            .iter()
            .position(|e| {
                acc += e.0;
                acc >= f64::from(p.top_p)
            })
            .map_or(probs.len(), |i| i + 1);
        probs.truncate(keep);
    }
    let total: f64 = probs.iter().map(|e| e.0).sum();
    for (prob, id) in probs {
        out[id as usize] = (prob / total) as f32;
    }
}

/// The id whose running sum of `probs` first passes `u * total`; the last positive entry when
/// rounding leaves it past the end; 0 when every entry is 0.
pub(crate) fn draw_from(probs: &[f32], u: f64) -> u32 {
    let total: f64 = probs.iter().map(|&x| f64::from(x)).sum();
    let mut r = u * total;
    let mut last = None;
    for (i, &x) in probs.iter().enumerate() {
        if x <= 0.0 {
            continue;
        }
        let x = f64::from(x);
        if r < x {
            return i as u32;
        }
        r -= x;
        last = Some(i as u32);
    }
    last.unwrap_or(0)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn probs(p: &SamplingParams, scores: &[f32]) -> Vec<f32> {
        let mut out = Vec::new();
        processed_probs(p, scores, &mut Vec::new(), &mut out);
        out
    }

    #[test]
    fn temperature_top_k_min_p_and_top_p_shape_the_distribution() {
        let scores = [1.0f32, 3.0, 2.0, f32::NEG_INFINITY, 0.0];
        let plain = SamplingParams {
            temperature: 2.0,
            ..Default::default()
        };
        let e: Vec<f64> = [1.0f64, 3.0, 2.0, 0.0]
            .iter()
            .map(|l| (l / 2.0).exp())
            .collect();
        let z: f64 = e.iter().sum();
        let got = probs(&plain, &scores);
        for (i, want) in [e[0] / z, e[1] / z, e[2] / z, 0.0, e[3] / z]
            .iter()
            .enumerate()
        {
            assert!((f64::from(got[i]) - want).abs() < 1e-6, "{got:?}");
        }
        let top2 = SamplingParams {
            top_k: 2,
            ..plain.clone()
        };
        let got = probs(&top2, &scores);
        assert_eq!(got.iter().filter(|&&x| x > 0.0).count(), 2);
        assert!((got[1] + got[2] - 1.0).abs() < 1e-6);
        // top_p 0.5 at T = 1: token 1 alone holds 0.64 of the mass.
        let nucleus = SamplingParams {
            temperature: 1.0,
            top_p: 0.5,
            ..Default::default()
        };
        assert_eq!(probs(&nucleus, &scores), vec![0.0, 1.0, 0.0, 0.0, 0.0]);
        // min_p 0.3 at T = 1: e^-1 = 0.37 of the best survives, e^-2 does not.
        let floor = SamplingParams {
            temperature: 1.0,
            min_p: 0.3,
            ..Default::default()
        };
        let got = probs(&floor, &scores);
        assert!(got[1] > 0.0 && got[2] > 0.0 && got[0] == 0.0 && got[4] == 0.0);
        assert_eq!(probs(&plain, &[f32::NEG_INFINITY; 3]), vec![0.0; 3]);
    }

    #[test]
    fn draw_walks_the_running_sum() {
        let p = [0.0f32, 0.25, 0.0, 0.75];
        assert_eq!(draw_from(&p, 0.0), 1);
        assert_eq!(draw_from(&p, 0.2), 1);
        assert_eq!(draw_from(&p, 0.3), 3);
        assert_eq!(draw_from(&p, 1.0), 3);
        assert_eq!(draw_from(&[0.0; 4], 0.5), 0);
    }
}
