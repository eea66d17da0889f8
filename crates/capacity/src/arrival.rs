//! When requests are sent: open-loop arrival schedules (Poisson, or gamma-distributed gaps with a
//! burstiness factor, or all at once) for a fixed count or a time window.
//!
//! Gamma gaps follow vLLM `benchmark_serving`: shape = burstiness, scale = 1 / (rate · shape), so
//! the mean gap stays 1/rate while the coefficient of variation is 1/sqrt(burstiness)
//! (burstiness 1 = Poisson, < 1 burstier, > 1 more regular).

use std::time::Duration;

use rand::RngExt;
use rand_chacha::ChaCha8Rng;

/// An open-loop arrival process.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Arrival {
    /// Every request at time 0 (`--request-rate inf`).
    AllAtOnce,
    /// Gamma-distributed gaps with mean 1/`rate` seconds; `burstiness` 1 is Poisson.
    Gamma {
        /// Mean requests per second.
        rate: f64,
        /// Gamma shape parameter.
        burstiness: f64,
    },
}

impl Arrival {
    /// The process for `rate` requests/s (infinite or non-positive: all at once).
    pub fn new(rate: f64, burstiness: f64) -> Self {
        if rate.is_finite() && rate > 0.0 {
            Arrival::Gamma { rate, burstiness }
        } else {
            Arrival::AllAtOnce
        }
    }

    /// One inter-arrival gap in seconds.
    pub fn gap(&self, rng: &mut ChaCha8Rng) -> f64 {
        match *self {
            Arrival::AllAtOnce => 0.0,
            Arrival::Gamma { rate, burstiness } => {
                if (burstiness - 1.0).abs() < 1e-12 {
                    sample_exponential(rng) / rate
                } else {
                    sample_gamma(rng, burstiness) / (rate * burstiness)
                }
            }
        }
    }

    /// Send times (offsets from the start) for `count` requests, stopping early at `window`.
    /// The first request goes at time 0.
    pub fn schedule(
        &self,
        rng: &mut ChaCha8Rng,
        count: usize,
        window: Option<Duration>,
    ) -> Vec<f64> {
        let limit = window.map_or(f64::INFINITY, |w| w.as_secs_f64());
        let mut times = Vec::with_capacity(count);
        let mut t = 0.0;
        while times.len() < count && t < limit {
            times.push(t);
            t += self.gap(rng);
        }
        times
    }
}

/// A uniform draw in (0, 1]: never 0, so its logarithm is finite.
fn open_unit(rng: &mut ChaCha8Rng) -> f64 {
    1.0 - rng.random::<f64>()
}

/// Exp(1) by inversion.
fn sample_exponential(rng: &mut ChaCha8Rng) -> f64 {
    -open_unit(rng).ln()
}

/// N(0, 1) by Box–Muller.
pub fn sample_standard_normal(rng: &mut ChaCha8Rng) -> f64 {
    let u1 = open_unit(rng);
    let u2 = rng.random::<f64>();
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

/// Gamma(shape, 1) by Marsaglia & Tsang (2000), "A simple method for generating gamma
/// variables"; for shape < 1 it boosts with Gamma(shape + 1) · U^(1/shape).
fn sample_gamma(rng: &mut ChaCha8Rng, shape: f64) -> f64 {
    if shape < 1.0 {
        let boost = open_unit(rng).powf(1.0 / shape);
        return sample_gamma(rng, shape + 1.0) * boost;
    }
    let d = shape - 1.0 / 3.0;
    let c = 1.0 / (9.0 * d).sqrt();
    loop {
        let x = sample_standard_normal(rng);
        let v = 1.0 + c * x;
        if v <= 0.0 {
            continue;
        }
        let v = v * v * v;
        let u = open_unit(rng);
        if u.ln() < 0.5 * x * x + d - d * v + d * v.ln() {
            return d * v;
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn gaps(arrival: Arrival, n: usize) -> (f64, f64) {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let xs: Vec<f64> = (0..n).map(|_| arrival.gap(&mut rng)).collect();
        let mean = xs.iter().sum::<f64>() / n as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        (mean, var.sqrt() / mean)
    }

    #[test]
    fn poisson_gaps_have_mean_one_over_rate_and_cv_one() {
        let (mean, cv) = gaps(Arrival::new(4.0, 1.0), 200_000);
        assert!((mean - 0.25).abs() < 0.25 * 0.01, "mean {mean}");
        assert!((cv - 1.0).abs() < 0.02, "cv {cv}");
    }

    #[test]
    fn gamma_burstiness_keeps_the_mean_and_sets_the_spread() {
        for burstiness in [0.25, 0.5, 2.0, 8.0] {
            let (mean, cv) = gaps(Arrival::new(10.0, burstiness), 200_000);
            let want_cv = 1.0 / f64::sqrt(burstiness);
            assert!(
                (mean - 0.1).abs() < 0.1 * 0.02,
                "burstiness {burstiness}: mean {mean}"
            );
            assert!(
                (cv - want_cv).abs() < want_cv * 0.03,
                "burstiness {burstiness}: cv {cv}"
            );
        }
    }

    #[test]
    fn schedule_is_bounded_by_count_and_window_and_reproducible() {
        let a = Arrival::new(100.0, 1.0);
        let s1 = a.schedule(&mut ChaCha8Rng::seed_from_u64(1), 50, None);
        let s2 = a.schedule(&mut ChaCha8Rng::seed_from_u64(1), 50, None);
        assert_eq!(s1, s2);
        assert_eq!(s1.len(), 50);
        assert_eq!(s1[0], 0.0);
        assert!(s1.windows(2).all(|w| w[0] <= w[1]));
        let windowed = a.schedule(
            &mut ChaCha8Rng::seed_from_u64(1),
            1_000_000,
            Some(Duration::from_secs(10)),
        );
        // About 1000 arrivals in 10 s at 100/s; Poisson sd is about 32.
        assert!((850..1150).contains(&windowed.len()), "{}", windowed.len());
        assert!(*windowed.last().unwrap() < 10.0);
        let burst =
            Arrival::new(f64::INFINITY, 1.0).schedule(&mut ChaCha8Rng::seed_from_u64(1), 5, None);
        assert_eq!(burst, vec![0.0; 5]);
    }

    #[test]
    fn standard_normal_moments() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let xs: Vec<f64> = (0..100_000)
            .map(|_| sample_standard_normal(&mut rng))
            .collect();
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        let var = xs.iter().map(|x| x * x).sum::<f64>() / xs.len() as f64 - mean * mean;
        assert!(
            mean.abs() < 0.02 && (var - 1.0).abs() < 0.02,
            "mean {mean} var {var}"
        );
    }
}
