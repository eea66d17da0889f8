//! What the planner is asked to serve: prompt and output lengths (fixed or uniform ranges),
//! the prompt tokens every request shares (a system prompt the prefix cache holds once) and
//! how bursty arrivals are. The same seed draws the same lengths and arrival times every run.

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::arrival::Arrival;

/// A token count: `lo == hi` is fixed, else uniform over `lo..=hi`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Length {
    /// Smallest.
    pub lo: u32,
    /// Largest.
    pub hi: u32,
}

impl Length {
    /// A fixed count.
    pub fn fixed(n: u32) -> Self {
        Self { lo: n, hi: n }
    }

    /// Mean of the distribution.
    pub fn mean(&self) -> f64 {
        (f64::from(self.lo) + f64::from(self.hi)) / 2.0
    }

    /// Parse `128` or `64..256`; every count at least 1.
    pub fn parse(text: &str) -> Result<Self, String> {
        let t = text.trim();
        let num = |s: &str| {
            s.trim()
                .parse::<u32>()
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| format!("`{s}` is not a positive token count"))
        };
        let (lo, hi) = match t.split_once("..") {
            Some((a, b)) => (num(a)?, num(b)?),
            None => (num(t)?, num(t)?),
        };
        if lo > hi {
            return Err(format!("`{t}`: the range is empty"));
        }
        Ok(Self { lo, hi })
    }

    fn sample(&self, rng: &mut ChaCha8Rng) -> u32 {
        if self.lo == self.hi {
            self.lo
        } else {
            rng.random_range(self.lo..=self.hi)
        }
    }
}

/// The traffic to plan for.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Workload {
    /// Prompt tokens per request (the shared prefix included).
    pub prompt_tokens: Length,
    /// Output tokens per request.
    pub output_tokens: Length,
    /// Leading prompt tokens every request shares (cached after the first request).
    pub shared_prefix_tokens: u32,
    /// The shared prefix is in the prefix cache before the first request arrives: a steady
    /// state, and what `pagoda bench --prefix-warmup` gives a shared-prefix run. Otherwise the first
    /// request computes it and every request arriving meanwhile waits on that prefill.
    #[serde(default)]
    pub shared_prefix_cached: bool,
    /// Gamma shape of arrival gaps: 1 = Poisson, < 1 burstier.
    pub burstiness: f64,
}

/// One simulated request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SimRequest {
    /// Seconds after the first arrival.
    pub arrival: f64,
    /// Prompt tokens.
    pub prompt: u32,
    /// Output tokens.
    pub output: u32,
}

impl Workload {
    /// `count` requests arriving at `rate` per second: arrival times drawn exactly as `pagoda
    /// bench` draws them for the same seed, lengths from a second stream.
    pub fn requests(&self, rate: f64, count: usize, seed: u64) -> Vec<SimRequest> {
        let mut arrivals_rng = ChaCha8Rng::seed_from_u64(seed ^ crate::ARRIVAL_SEED_SALT);
        let times = Arrival::new(rate, self.burstiness).schedule(&mut arrivals_rng, count, None);
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        times
            .into_iter()
            .map(|arrival| SimRequest {
                arrival,
                prompt: self
                    .prompt_tokens
                    .sample(&mut rng)
                    .max(self.shared_prefix_tokens + 1),
                output: self.output_tokens.sample(&mut rng),
            })
            .collect()
    }

    /// The largest number of KV tokens one request holds (its own, without the shared prefix).
    pub fn max_own_tokens(&self) -> u64 {
        u64::from(self.prompt_tokens.hi.max(self.shared_prefix_tokens + 1))
            + u64::from(self.output_tokens.hi)
            - u64::from(self.shared_prefix_tokens)
    }
}
