//! The step-cost model fitted to a profile: seconds of one engine step as
//! `base(tokens) + attention · attended + sample · seqs + overhead`, where `attended` counts
//! (token, cached token) pairs that attention reads. `base` is the measured curve of a step
//! against its token count with the attention share taken out: flat while a step is bound by
//! streaming the weights from memory, rising once the matmuls turn compute-bound. Those
//! three parts are also the planner's answer to "which resource binds".

use crate::profile::CostProfile;

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

/// Step time as a function of the step's shape.
#[derive(Debug, Clone, PartialEq)]
pub struct StepCost {
    /// (tokens, seconds) without attention, ascending and never decreasing.
    base: Vec<(f64, f64)>,
    /// Seconds per attended (query token, cached token) pair.
    attention: f64,
    sample: f64,
    overhead: f64,
}

impl StepCost {
    /// Fit to `profile` (checked: it has decode and prefill points).
    pub fn fit(profile: &CostProfile) -> Self {
        // Attention slope: the same batch at two contexts differs by attention alone.
        let mut slopes: Vec<f64> = Vec::new();
        for a in &profile.decode {
            for b in &profile.decode {
                if a.seqs == b.seqs && b.context > a.context {
                    let pairs = (a.seqs * (b.context - a.context)) as f64;
                    slopes.push(((b.secs - a.secs) / pairs).max(0.0));
                }
            }
        }
        slopes.sort_by(f64::total_cmp);
        let attention = slopes.get(slopes.len() / 2).copied().unwrap_or(0.0);
        let mut base: Vec<(f64, f64)> = profile
            .decode
            .iter()
            .map(|d| {
                let attended = (d.seqs * d.context) as f64;
                (d.seqs as f64, d.secs - attention * attended)
            })
            .chain(profile.prefill.iter().map(|p| {
                (
                    p.tokens as f64,
                    p.secs - attention * prefill_pairs(p.context, p.tokens),
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
        Self {
            base,
            attention,
            sample: profile.sample_secs_per_seq.max(0.0),
            overhead: profile.step_overhead_secs.max(0.0),
        }
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
    pub fn parts(&self, tokens: usize, attended: f64, seqs: usize) -> StepParts {
        let weights = self.base(1);
        StepParts {
            weights,
            compute: (self.base(tokens) - weights).max(0.0),
            kv_read: self.attention * attended,
            other: self.overhead + self.sample * seqs as f64,
        }
    }

    /// Seconds of that step.
    pub fn step_secs(&self, tokens: usize, attended: f64, seqs: usize) -> f64 {
        self.parts(tokens, attended, seqs).total()
    }

    /// Seconds of a decode step of `seqs` sequences at `context` tokens each.
    pub fn decode_secs(&self, seqs: usize, context: usize) -> f64 {
        self.step_secs(seqs, (seqs * context) as f64, seqs)
    }

    /// Seconds of a prefill chunk of `tokens` tokens after `context` cached ones.
    pub fn prefill_secs(&self, tokens: usize, context: usize) -> f64 {
        self.step_secs(tokens, prefill_pairs(context, tokens), 1)
    }
}

/// Attention pairs of a chunk of `tokens` tokens after `context` cached ones (causal: the
/// i-th new token sees `context + i + 1`).
pub fn prefill_pairs(context: usize, tokens: usize) -> f64 {
    let (c, t) = (context as f64, tokens as f64);
    t * c + t * (t + 1.0) / 2.0
}
