//! KL divergence of a model's next-token distributions against a base model's, position by
//! position, summarised as llama-perplexity's `--kl-divergence` does: mean KLD with its
//! standard error, its tail percentiles, the rate at which both pick the same top token, and
//! the change in the probability of the token that actually came next.

/// One scored position: `base` and `cur` are full-vocabulary log-probabilities, `next` the
/// token that followed. Returns KL(base || cur), whether the argmaxes agree, and
/// p_cur(next) - p_base(next).
pub fn compare_row(base: &[f32], cur: &[f32], next: u32) -> (f64, bool, f64) {
    let mut kld = 0.0f64;
    let (mut top_b, mut top_c) = (0usize, 0usize);
    for (i, (&b, &c)) in base.iter().zip(cur).enumerate() {
        let (b, c) = (f64::from(b), f64::from(c));
        kld += b.exp() * (b - c);
        if base[i] > base[top_b] {
            top_b = i;
        }
        if cur[i] > cur[top_c] {
            top_c = i;
        }
    }
    let n = next as usize;
    let dp = f64::from(cur[n]).exp() - f64::from(base[n]).exp();
    // Rounding (the base is stored as f16) can leave a tiny negative sum for equal inputs.
    (kld.max(0.0), top_b == top_c, dp)
}

/// Accumulates `compare_row`'s results and the two models' log-likelihoods.
#[derive(Clone, Debug, Default)]
pub struct KldStats {
    klds: Vec<f64>,
    same_top: u64,
    dp_sum: f64,
    dp_sq: f64,
    nll_base: f64,
    nll_cur: f64,
}

/// The summary printed at the end.
#[derive(Clone, Debug, PartialEq)]
pub struct KldSummary {
    pub positions: usize,
    pub ppl_base: f64,
    pub ppl_cur: f64,
    /// Mean of ln(PPL(cur) / PPL(base)).
    pub ln_ppl_ratio: f64,
    pub mean_kld: f64,
    pub mean_kld_error: f64,
    pub max_kld: f64,
    pub p99_9_kld: f64,
    pub p99_kld: f64,
    pub p95_kld: f64,
    pub median_kld: f64,
    /// Fraction of positions where both models' most likely token is the same.
    pub same_top: f64,
    pub rms_dp: f64,
}

impl KldStats {
    /// Adds one position (`base_lp_next`, `cur_lp_next`: both log-probs of the next token).
    pub fn add(&mut self, row: (f64, bool, f64), base_lp_next: f64, cur_lp_next: f64) {
        let (kld, same, dp) = row;
        self.klds.push(kld);
        self.same_top += u64::from(same);
        self.dp_sum += dp;
        self.dp_sq += dp * dp;
        self.nll_base -= base_lp_next;
        self.nll_cur -= cur_lp_next;
    }

    pub fn summary(&self) -> KldSummary {
        let n = self.klds.len().max(1) as f64;
        let mut sorted = self.klds.clone();
        sorted.sort_by(f64::total_cmp);
        let pct = |p: f64| {
            if sorted.is_empty() {
                return 0.0;
            }
            let i = ((sorted.len() - 1) as f64 * p).round() as usize;
            sorted[i]
        };
        let mean = sorted.iter().sum::<f64>() / n;
        let var = (sorted.iter().map(|k| k * k).sum::<f64>() / n - mean * mean).max(0.0);
        KldSummary {
            positions: self.klds.len(),
            ppl_base: (self.nll_base / n).exp(),
            ppl_cur: (self.nll_cur / n).exp(),
            ln_ppl_ratio: (self.nll_cur - self.nll_base) / n,
            mean_kld: mean,
            mean_kld_error: if n > 1.0 {
                (var / (n - 1.0)).sqrt()
            } else {
                0.0
            },
            max_kld: sorted.last().copied().unwrap_or(0.0),
            p99_9_kld: pct(0.999),
            p99_kld: pct(0.99),
            p95_kld: pct(0.95),
            median_kld: pct(0.5),
            same_top: self.same_top as f64 / n,
            rms_dp: (self.dp_sq / n).sqrt(),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::eval::log_softmax;

    #[test]
    fn a_distribution_against_itself_has_no_divergence() {
        let mut a: Vec<f32> = (0..50).map(|i| (i as f32 * 0.37).sin() * 4.0).collect();
        log_softmax(&mut a);
        let (kld, same, dp) = compare_row(&a, &a, 7);
        assert!(kld.abs() < 1e-12);
        assert!(same);
        assert_eq!(dp, 0.0);
    }

    #[test]
    fn divergence_of_two_coins_matches_the_formula() {
        // KL((0.5, 0.5) || (0.9, 0.1)) = 0.5 ln(0.5/0.9) + 0.5 ln(0.5/0.1)
        let base = [0.5f32.ln(), 0.5f32.ln()];
        let cur = [0.9f32.ln(), 0.1f32.ln()];
        let (kld, _, dp) = compare_row(&base, &cur, 1);
        let want = 0.5 * (0.5f64 / 0.9).ln() + 0.5 * (0.5f64 / 0.1).ln();
        assert!((kld - want).abs() < 1e-6, "{kld} vs {want}");
        assert!((dp - (0.1 - 0.5)).abs() < 1e-6);
        let mut s = KldStats::default();
        s.add((kld, false, dp), 0.5f64.ln(), 0.1f64.ln());
        s.add((0.0, true, 0.0), 0.5f64.ln(), 0.5f64.ln());
        let m = s.summary();
        assert_eq!(m.positions, 2);
        assert!((m.mean_kld - want / 2.0).abs() < 1e-6);
        assert_eq!(m.same_top, 0.5);
        assert!((m.ppl_base - 2.0).abs() < 1e-9);
        assert!((m.ppl_cur - (0.05f64).sqrt().recip()).abs() < 1e-9);
    }
}
