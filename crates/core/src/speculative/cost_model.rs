//! How long a step takes as a function of the tokens in it: measured at start-up (the executor
//! times a few batch sizes) and refined online from every step. Decode on a CPU reads all the
//! weights once per step whatever the batch, so the curve is flat until the matmuls turn
//! compute-bound, then rises about linearly; speculation pays only on the flat part.

/// Buckets by powers of two of the token count: 1, 2, 4, ..., 2^15.
const BUCKETS: usize = 16;
/// Weight of a new observation in its bucket's running mean.
const LEARN: f64 = 0.1;

#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Bucket {
    /// Mean token count and mean seconds of the steps seen in this bucket.
    tokens: f64,
    secs: f64,
    seen: bool,
}

/// Step time against batch tokens.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StepCostModel {
    buckets: [Bucket; BUCKETS],
}

fn bucket_of(tokens: usize) -> usize {
    (usize::BITS - tokens.max(1).leading_zeros() - 1).min(BUCKETS as u32 - 1) as usize
}

impl StepCostModel {
    /// Records a step of `tokens` tokens that took `secs` seconds.
    pub fn observe(&mut self, tokens: usize, secs: f64) {
        if tokens == 0 || !secs.is_finite() || secs <= 0.0 {
            return;
        }
        let b = &mut self.buckets[bucket_of(tokens)];
        if b.seen {
            b.tokens += LEARN * (tokens as f64 - b.tokens);
            b.secs += LEARN * (secs - b.secs);
        } else {
            *b = Bucket {
                tokens: tokens as f64,
                secs,
                seen: true,
            };
        }
    }

    /// Whether any step has been seen.
    pub fn is_known(&self) -> bool {
        self.buckets.iter().any(|b| b.seen)
    }

    /// Predicted seconds of a step of `tokens` tokens: linear between the nearest measured
    /// points, flat below the first and along the last slope (never below flat) past the last.
    pub fn predict(&self, tokens: usize) -> f64 {
        let t = tokens.max(1) as f64;
        // A bigger step never costs less: noise that says so would make tokens look free.
        let mut floor = 0.0f64;
        let known: Vec<Bucket> = self
            .buckets
            .iter()
            .filter(|b| b.seen)
            .map(|b| {
                floor = floor.max(b.secs);
                Bucket { secs: floor, ..*b }
            })
            .collect();
        let (Some(first), Some(last)) = (known.first(), known.last()) else {
            return t; // nothing measured: proportional, so speculation is never chosen blind
        };
        if t <= first.tokens {
            return first.secs;
        }
        for w in known.windows(2) {
            let (a, b) = (&w[0], &w[1]);
            if t <= b.tokens {
                let span = (b.tokens - a.tokens).max(1e-9);
                return a.secs + (b.secs - a.secs) * (t - a.tokens) / span;
            }
        }
        // Past the last point: the last segment's slope, at least the per-token cost of the
        // last point itself (large batches are compute-bound).
        let slope = match known.len() {
            1 => 0.0,
            n => {
                let (a, b) = (&known[n - 2], &known[n - 1]);
                ((b.secs - a.secs) / (b.tokens - a.tokens).max(1e-9)).max(0.0)
            }
        };
        let slope = slope.max(last.secs / last.tokens.max(1.0) * 0.5);
        last.secs + slope * (t - last.tokens)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interpolates_between_and_extends_past_the_measurements() {
        let mut m = StepCostModel::default();
        assert!(!m.is_known());
        m.observe(1, 0.010);
        m.observe(16, 0.012);
        m.observe(64, 0.040);
        assert_eq!(m.predict(1), 0.010);
        let mid = m.predict(8);
        assert!(mid > 0.010 && mid < 0.012, "{mid}");
        let far = m.predict(128);
        assert!(far > 0.070, "{far}");
        // Online steps move a bucket's mean.
        for _ in 0..100 {
            m.observe(64, 0.080);
        }
        assert!((m.predict(64) - 0.080).abs() < 0.002);
        m.observe(0, 1.0);
        m.observe(4, f64::NAN);
        assert!((m.predict(64) - 0.080).abs() < 0.002);
        // A noisy point below an earlier one does not make bigger steps look cheaper.
        let mut m = StepCostModel::default();
        m.observe(1, 0.100);
        m.observe(2, 0.090);
        assert!(m.predict(2) >= m.predict(1));
    }
}
