//! The step-cost model fitted to a profile: seconds of one engine step as
//! `base(tokens) + decode_attention(decode rows) · decode pairs + prefill_attention · prefill
//! pairs + sample · seqs + overhead`, where pairs count (token, cached token) pairs that
//! attention reads and a decode pair's cost depends on how many decode rows share the step.
//! `base` is the measured curve of a step against its token count with the attention share taken
//! out: flat while a step is bound by streaming the weights from memory, rising once the matmuls
//! turn compute-bound. Those parts are also the planner's answer to "which resource binds".
//! When the profile timed decode steps through a server too, every term is scaled by how much
//! slower those ran than the forwards (the server's share of a step, measured, not assumed).

use crate::profile::{CostProfile, DecodePoint};

/// Where a step's time goes, seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StepParts {
    /// Streaming the weights once (the step time of a single token): memory bandwidth.
    pub weights: f64,
    /// Matmul work above that floor: compute.
    pub compute: f64,
    /// Attention reading cached K and V: memory bandwidth.
    pub kv_read: f64,
    /// Sampling and the step's fixed overhead.
    pub other: f64,
}

impl StepParts {
    /// The whole step.
    pub fn total(&self) -> f64 {
        self.weights + self.compute + self.kv_read + self.other
    }
}

/// Attention pairs of one step: (query token, cached token) pairs read by one-token rows
/// (decodes) and by prompt chunks. A chunk's queries share each K/V row they read, so a pair
/// costs a fraction of a decode's (a 1.5B model on 2 cores: ~2 us against up to 7 us), and a
/// decode pair's cost depends on the batch it is in.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Pairs {
    /// One-token rows in the step.
    pub decode_rows: usize,
    /// Pairs of one-token rows.
    pub decode: f64,
    /// Pairs of prompt chunks of two or more tokens.
    pub prefill: f64,
}

impl Pairs {
    /// The pairs of a row of `n` tokens after `context` cached ones.
    pub fn of_row(context: usize, n: usize) -> Self {
        let pairs = prefill_pairs(context, n);
        if n > 1 {
            Self {
                decode_rows: 0,
                decode: 0.0,
                prefill: pairs,
            }
        } else {
            Self {
                decode_rows: 1,
                decode: pairs,
                prefill: 0.0,
            }
        }
    }

    /// Both kinds summed with `other`'s.
    pub fn plus(self, other: Self) -> Self {
        Self {
            decode_rows: self.decode_rows + other.decode_rows,
            decode: self.decode + other.decode,
            prefill: self.prefill + other.prefill,
        }
    }
}

/// Step time as a function of the step's shape.
#[derive(Debug, Clone, PartialEq)]
pub struct StepCost {
    /// (tokens, seconds) without attention, ascending and never decreasing.
    base: Vec<(f64, f64)>,
    /// (decode rows, seconds per attended pair of a decode row), ascending.
    decode_attention: Vec<(f64, f64)>,
    /// Seconds per attended pair of a prompt chunk.
    prefill_attention: f64,
    sample: f64,
    overhead: f64,
    /// Served decode steps over the fitted forwards (1 without served points); already
    /// applied to every term above.
    served_factor: f64,
}

impl StepCost {
    /// Fit to `profile` (checked: it has decode and prefill points).
    pub fn fit(profile: &CostProfile) -> Self {
        // Attention slope: the same batch at two contexts differs by attention alone. One slope
        // per batch size: with one (their median) for all, the base of a batch size whose own
        // slope is smaller came out too low, and its decodes 15-20% quicker than measured.
        let mut by_seqs: Vec<(usize, Vec<f64>)> = Vec::new();
        for a in &profile.decode {
            for b in &profile.decode {
                if a.seqs == b.seqs && b.context > a.context {
                    let pairs = (a.seqs * (b.context - a.context)) as f64;
                    let slope = ((b.secs - a.secs) / pairs).max(0.0);
                    match by_seqs.iter_mut().find(|(s, _)| *s == a.seqs) {
                        Some((_, v)) => v.push(slope),
                        None => by_seqs.push((a.seqs, vec![slope])),
                    }
                }
            }
        }
        let mut decode_attention: Vec<(f64, f64)> = by_seqs
            .into_iter()
            .filter_map(|(seqs, v)| median(v).map(|m| (seqs as f64, m)))
            .collect();
        decode_attention.sort_by(|a, b| a.0.total_cmp(&b.0));
        let overall = median(decode_attention.iter().map(|p| p.1).collect()).unwrap_or(0.0);
        // A prompt chunk's slope: for each chunk size timed after several contexts, the
        // least-squares line of its seconds against its pairs; the median over chunk sizes.
        // Without such a chunk size, the decode slopes' median. Priced at that median, the
        // 256-token chunk after 1,024 cached tokens had the quickest 256-token base, half the
        // measured chunk's time; taken from two single timings (contexts 0 and 1,024), the
        // slope came out ~2.2 us a pair on the 1.5B and every long prompt 5-10% too slow.
        let mut sizes: Vec<usize> = profile.prefill.iter().map(|p| p.tokens).collect();
        sizes.sort_unstable();
        sizes.dedup();
        let slopes: Vec<f64> = sizes
            .iter()
            .filter_map(|&tokens| {
                let points: Vec<(f64, f64)> = profile
                    .prefill
                    .iter()
                    .filter(|p| p.tokens == tokens)
                    .map(|p| (prefill_pairs(p.context, p.tokens), p.secs))
                    .collect();
                least_squares_slope(&points).map(|s| s.max(0.0))
            })
            .collect();
        let prefill_attention = median(slopes).unwrap_or(overall);
        let mut base: Vec<(f64, f64)> = profile
            .decode
            .iter()
            .map(|d| {
                let attended = (d.seqs * d.context) as f64;
                let slope = interpolate(&decode_attention, d.seqs as f64).unwrap_or(0.0);
                (d.seqs as f64, d.secs - slope * attended)
            })
            .chain(profile.prefill.iter().map(|p| {
                (
                    p.tokens as f64,
                    p.secs - prefill_attention * prefill_pairs(p.context, p.tokens),
                )
            }))
            .collect();
        base.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
        // One point per token count (the quickest: noise only ever adds time), then a running
        // maximum: a bigger step never costs less.
        base.dedup_by(|later, kept| later.0 == kept.0);
        let mut floor = 0.0f64;
        for p in &mut base {
            floor = floor.max(p.1.max(1e-6));
            p.1 = floor;
        }
        let forwards = Self {
            base,
            decode_attention,
            prefill_attention,
            sample: profile.sample_secs_per_seq.max(0.0),
            overhead: profile.step_overhead_secs.max(0.0),
            served_factor: 1.0,
        };
        forwards.served(&profile.served_decode)
    }

    /// Scaled to the served decode steps: by the median of their ratios to the fitted ones.
    /// On this machine a served step ran 4-10% over the forward timed beside it at 1-16
    /// sequences, alike at 128 and 1,100 tokens of context, so one factor for all terms; and
    /// near a TPOT cliff a 7% quicker step put the planner's rate 13% too high.
    fn served(self, points: &[DecodePoint]) -> Self {
        let ratios: Vec<f64> = points
            .iter()
            .filter(|p| p.secs > 0.0 && p.seqs > 0)
            .map(|p| p.secs / self.decode_secs(p.seqs, p.context))
            .filter(|r| r.is_finite())
            .collect();
        match median(ratios) {
            Some(factor) => Self {
                served_factor: factor,
                ..self.scaled(factor)
            },
            None => self,
        }
    }

    /// Every step `factor` times as long.
    pub fn scaled(&self, factor: f64) -> Self {
        let scale = |points: &[(f64, f64)]| points.iter().map(|&(x, y)| (x, y * factor)).collect();
        Self {
            base: scale(&self.base),
            decode_attention: scale(&self.decode_attention),
            prefill_attention: self.prefill_attention * factor,
            sample: self.sample * factor,
            overhead: self.overhead * factor,
            served_factor: self.served_factor,
        }
    }

    /// Served decode steps over the forwards timed beside them (1 when the profile has none).
    pub fn served_factor(&self) -> f64 {
        self.served_factor
    }

    /// Forward time of `tokens` tokens without attention: linear between measured points,
    /// flat below the first and along the last segment's slope past the last.
    fn base(&self, tokens: usize) -> f64 {
        let t = tokens.max(1) as f64;
        let (Some(&first), Some(&last)) = (self.base.first(), self.base.last()) else {
            return 0.0;
        };
        if t <= first.0 {
            return first.1;
        }
        for w in self.base.windows(2) {
            let ((x0, y0), (x1, y1)) = (w[0], w[1]);
            if t <= x1 {
                return y0 + (y1 - y0) * (t - x0) / (x1 - x0).max(1e-9);
            }
        }
        let slope = match self.base.len() {
            n if n >= 2 => {
                let (x0, y0) = self.base[n - 2];
                (last.1 - y0) / (last.0 - x0).max(1e-9)
            }
            _ => last.1 / last.0,
        };
        last.1 + slope.max(0.0) * (t - last.0)
    }

    /// Where the time of a step with `tokens` tokens, `attended` attention pairs and `seqs`
    /// sampled rows goes.
    pub fn parts(&self, tokens: usize, attended: Pairs, seqs: usize) -> StepParts {
        let weights = self.base(1);
        StepParts {
            weights,
            compute: (self.base(tokens) - weights).max(0.0),
            kv_read: self.decode_slope(attended.decode_rows) * attended.decode
                + self.prefill_attention * attended.prefill,
            other: self.overhead + self.sample * seqs as f64,
        }
    }

    /// Seconds of that step.
    pub fn step_secs(&self, tokens: usize, attended: Pairs, seqs: usize) -> f64 {
        self.parts(tokens, attended, seqs).total()
    }

    /// Seconds of a decode step of `seqs` sequences at `context` tokens each.
    pub fn decode_secs(&self, seqs: usize, context: usize) -> f64 {
        let attended = Pairs {
            decode_rows: seqs,
            decode: (seqs * context) as f64,
            prefill: 0.0,
        };
        self.step_secs(seqs, attended, seqs)
    }

    /// Seconds of a prefill chunk of `tokens` tokens after `context` cached ones.
    pub fn prefill_secs(&self, tokens: usize, context: usize) -> f64 {
        self.step_secs(tokens, Pairs::of_row(context, tokens), 1)
    }

    /// Seconds per attended pair of a decode row in a step of `rows` decode rows.
    fn decode_slope(&self, rows: usize) -> f64 {
        interpolate(&self.decode_attention, rows as f64).unwrap_or(self.prefill_attention)
    }
}

/// `points` (ascending x) at `x`: linear between points, the end values outside them.
fn interpolate(points: &[(f64, f64)], x: f64) -> Option<f64> {
    let (first, last) = (points.first()?, points.last()?);
    if x <= first.0 {
        return Some(first.1);
    }
    for w in points.windows(2) {
        let ((x0, y0), (x1, y1)) = (w[0], w[1]);
        if x <= x1 {
            return Some(y0 + (y1 - y0) * (x - x0) / (x1 - x0).max(1e-9));
        }
    }
    Some(last.1)
}

/// The slope of the least-squares line through `points` (x, y); `None` with fewer than two
/// distinct x.
fn least_squares_slope(points: &[(f64, f64)]) -> Option<f64> {
    let n = points.len() as f64;
    let mean_x = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_y = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mean_x).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mean_x) * (p.1 - mean_y)).sum();
    (points.len() >= 2 && sxx > 0.0).then(|| sxy / sxx)
}

/// The middle of `values` (the upper one of an even count); `None` when empty.
pub fn median(mut values: Vec<f64>) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied()
}

/// Attention pairs of a chunk of `tokens` tokens after `context` cached ones (causal: the
/// i-th new token sees `context + i + 1`).
pub fn prefill_pairs(context: usize, tokens: usize) -> f64 {
    let (c, t) = (context as f64, tokens as f64);
    t * c + t * (t + 1.0) / 2.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::PrefillPoint;
    use crate::simulate::tests::synthetic;

    #[test]
    fn prompt_chunks_and_decodes_get_their_own_attention_slopes() {
        // Steps cost 10 ms flat; decode rows pay 4 us a pair, prompt chunks 1.5 us (what a
        // 1.5B model measured on 2 cores, roughly): one slope for both overcharged long prompts.
        let (decode, prefill) = (4e-6, 1.5e-6);
        let mut p = synthetic(0.010, 64, 0.0);
        for d in &mut p.decode {
            d.secs += decode * (d.seqs * d.context) as f64;
        }
        p.prefill = [(64, 0), (256, 0), (256, 1024)]
            .iter()
            .map(|&(tokens, context)| PrefillPoint {
                tokens,
                context,
                secs: 0.010 + prefill * prefill_pairs(context, tokens),
            })
            .collect();
        let cost = StepCost::fit(&p);
        // A 1,024-token prompt in four chunks of 256: 4 flat steps plus its causal pairs at the
        // prompt slope, 1024 * 1025 / 2 = 524,800 pairs = 0.787 s (0.2099 s a step on average).
        let chunks: f64 = (0..4).map(|k| cost.prefill_secs(256, 256 * k)).sum();
        assert!(
            (chunks - (0.040 + 524_800.0 * prefill)).abs() < 1e-9,
            "{chunks}"
        );
        // Sixteen decodes at 1,000 tokens: 16,000 pairs at the decode slope.
        let step = cost.decode_secs(16, 1000);
        assert!((step - (0.010 + 16_000.0 * decode)).abs() < 1e-9, "{step}");
        // A mixed step adds each row's pairs at its own slope.
        let mixed = Pairs::of_row(1000, 1).plus(Pairs::of_row(512, 256));
        assert_eq!(mixed.decode, 1001.0);
        assert_eq!(mixed.prefill, 256.0 * 512.0 + 256.0 * 257.0 / 2.0);
        let secs = cost.step_secs(257, mixed, 2);
        let want = 0.010 + 1001.0 * decode + mixed.prefill * prefill;
        assert!((secs - want).abs() < 1e-9, "{secs} vs {want}");
        // Decode pairs cost less in a bigger batch: each batch size keeps its own slope, so the
        // measured steps are reproduced exactly and sizes between are interpolated.
        let mut q = synthetic(0.010, 64, 0.0);
        for d in &mut q.decode {
            let slope = if d.seqs == 1 { 6e-6 } else { 3e-6 };
            d.secs += slope * (d.seqs * d.context) as f64;
        }
        let cost = StepCost::fit(&q);
        for (seqs, slope) in [(1, 6e-6), (64, 3e-6), (32, 6e-6 - 3e-6 * 31.0 / 63.0)] {
            let got = cost.decode_secs(seqs, 500);
            let want = 0.010 + slope * (seqs * 500) as f64;
            assert!((got - want).abs() < 1e-9, "{seqs}: {got} vs {want}");
        }
        // Without two contexts for one chunk size, prompts fall back to the decode slope.
        p.prefill.pop();
        let cost = StepCost::fit(&p);
        let got = cost.prefill_secs(256, 1024);
        let want = 0.010 + decode * prefill_pairs(1024, 256);
        assert!((got - want).abs() < 1e-9, "{got} vs {want}");
    }

    #[test]
    fn prompt_slope_is_fitted_through_every_context_of_a_chunk_size() {
        // 256-token chunks after 0, 512, 1,024 and 2,048 cached tokens at 10 ms + 1 us a pair,
        // the one after 1,024 timed 0.1 s slow (a noisy single run).
        let (slope, noise) = (1e-6, 0.1);
        let mut p = synthetic(0.010, 64, 0.0);
        p.prefill = [(256, 0), (256, 512), (256, 1024), (256, 2048)]
            .iter()
            .map(|&(tokens, context)| PrefillPoint {
                tokens,
                context,
                secs: 0.010
                    + slope * prefill_pairs(context, tokens)
                    + if context == 1024 { noise } else { 0.0 },
            })
            .collect();
        let cost = StepCost::fit(&p);
        // Pairs grow by 256 a cached token, so the line's slope against pairs is
        // 1 us + 0.1 s x (1,024 - 896) / (2,293,760 x 256): the contexts' mean is 896 and
        // their squared deviations sum to 2,293,760. Between the two timings at 0 and 1,024
        // alone it would be 1 us + 0.1 s / 262,144 pairs = 1.38 us.
        let fitted = slope + noise * 128.0 / (2_293_760.0 * 256.0);
        let got = (cost.prefill_secs(256, 2048) - cost.prefill_secs(256, 0)) / (256.0 * 2048.0);
        assert!((got - fitted).abs() < 1e-15, "{got} vs {fitted}");
        assert!(got < 1.03e-6, "{got}");
        // The base keeps the quickest 256-token point once the fitted attention is out (the
        // chunk after 2,048 tokens, which the slightly steeper line undercharges by the most),
        // raised to the 64-row decode's 10 ms: a bigger step never costs less.
        let lone = cost.prefill_secs(256, 0);
        let want = 0.010 + fitted * prefill_pairs(0, 256);
        assert!((lone - want).abs() < 1e-12, "{lone} vs {want}");
        // With exact timings the line goes through every point.
        for q in &mut p.prefill {
            q.secs = 0.010 + slope * prefill_pairs(q.context, q.tokens);
        }
        let cost = StepCost::fit(&p);
        for context in [0, 256, 768, 3000] {
            let got = cost.prefill_secs(256, context);
            let want = 0.010 + slope * prefill_pairs(context, 256);
            assert!((got - want).abs() < 1e-12, "{context}: {got} vs {want}");
        }
    }

    #[test]
    fn served_steps_scale_every_cost_by_their_median_ratio() {
        // Forwards: 10 ms flat plus 4 us a decode pair. Served decodes ran 8% over them, but
        // for one outlier (a slow moment of the machine) the median ignores.
        let mut p = synthetic(0.010, 64, 0.0);
        for d in &mut p.decode {
            d.secs += 4e-6 * (d.seqs * d.context) as f64;
        }
        let forwards = StepCost::fit(&p);
        assert_eq!(forwards.served_factor(), 1.0);
        p.served_decode = [(1, 1.08), (4, 1.08), (16, 1.6)]
            .iter()
            .map(|&(seqs, ratio)| DecodePoint {
                seqs,
                context: 144,
                secs: ratio * forwards.decode_secs(seqs, 144),
            })
            .collect();
        let served = StepCost::fit(&p);
        assert!((served.served_factor() - 1.08).abs() < 1e-9);
        for (seqs, context) in [(1, 128), (8, 700), (32, 2048)] {
            let (a, b) = (
                forwards.decode_secs(seqs, context),
                served.decode_secs(seqs, context),
            );
            assert!(
                (b / a - 1.08).abs() < 1e-9,
                "decode {seqs}x{context}: {b} vs {a}"
            );
        }
        let (a, b) = (
            forwards.prefill_secs(256, 512),
            served.prefill_secs(256, 512),
        );
        assert!((b / a - 1.08).abs() < 1e-9, "prefill: {b} vs {a}");
    }
}
