//! The SLO policy's step rule (`--slo tpot=..`): a step may hold only as many tokens as the
//! step-cost curve says fit in the TPOT target, so the running decodes keep their pace while
//! prefills advance in what is left, and a waiting sequence is let in only while the decode batch
//! it joins still fits. The curve is the executor's start-up timing, refined by every step.

use std::time::Duration;

use crate::speculative::StepCostModel;

/// Latency targets a server promises its admitted requests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SloTargets {
    /// Time to first token, from arrival.
    pub ttft: Option<Duration>,
    /// Time per output token after the first (each decode step's length).
    pub tpot: Option<Duration>,
}

/// The per-step rule and the step-cost curve it reads.
#[derive(Clone, Debug)]
pub struct SloPolicy {
    targets: SloTargets,
    cost: StepCostModel,
    /// Whether observed steps refine the curve (off for a curve given whole, as tests do).
    learn: bool,
}

impl SloPolicy {
    /// A policy that learns its curve from the steps it sees.
    pub fn new(targets: SloTargets) -> Self {
        Self {
            targets,
            cost: StepCostModel::default(),
            learn: true,
        }
    }

    /// A policy on a fixed curve: `cost(tokens)` seconds per step, measured at powers of two.
    pub fn with_fixed_cost(targets: SloTargets, cost: impl Fn(usize) -> f64) -> Self {
        let mut p = Self::new(targets);
        p.calibrate((0..16).map(|i| (1usize << i, cost(1 << i))));
        p.learn = false;
        p
    }

    pub fn targets(&self) -> SloTargets {
        self.targets
    }

    /// Seeds the curve with timed steps of (tokens, seconds).
    pub fn calibrate(&mut self, points: impl IntoIterator<Item = (usize, f64)>) {
        for (tokens, secs) in points {
            self.cost.observe(tokens, secs);
        }
    }

    /// Records a step the engine ran.
    pub fn observe(&mut self, tokens: usize, secs: f64) {
        if self.learn {
            self.cost.observe(tokens, secs);
        }
    }

    /// The step-cost curve, once anything is known of it.
    pub fn cost(&self) -> Option<&StepCostModel> {
        self.cost.is_known().then_some(&self.cost)
    }

    /// Predicted seconds of a step of `tokens` tokens (`None` before anything is known).
    pub fn step_secs(&self, tokens: usize) -> Option<f64> {
        self.cost.is_known().then(|| self.cost.predict(tokens))
    }

    fn fits(&self, tokens: usize) -> bool {
        match (self.targets.tpot, self.step_secs(tokens)) {
            (Some(tpot), Some(secs)) => secs <= tpot.as_secs_f64(),
            // No target, or nothing measured yet: no reason to hold anything back.
            _ => true,
        }
    }

    /// The step's token budget with `decodes` sequences decoding: the most tokens, up to `max`,
    /// whose step fits the TPOT target, and never fewer than one per decode (they cannot go
    /// faster by being skipped; admission is what keeps their number in check).
    pub fn step_budget(&self, decodes: usize, max: usize) -> usize {
        let floor = decodes.min(max);
        if self.fits(max) {
            return max;
        }
        // The curve never falls as tokens grow: the last token count that fits, by bisection.
        let (mut lo, mut hi) = (floor, max);
        while lo + 1 < hi {
            let mid = lo + (hi - lo) / 2;
            if self.fits(mid) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        lo.max(floor)
    }

    /// Whether a decode batch of `seqs` sequences keeps the TPOT target.
    pub fn admits(&self, seqs: usize) -> bool {
        self.fits(seqs)
    }

    /// The most sequences a decode batch holds within the TPOT target, up to `max`.
    pub fn decode_cap(&self, max: usize) -> usize {
        self.step_budget(0, max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn targets(tpot_ms: u64) -> SloTargets {
        SloTargets {
            ttft: None,
            tpot: Some(Duration::from_millis(tpot_ms)),
        }
    }

    /// 10 ms a step plus 1 ms a token.
    fn linear(tokens: usize) -> f64 {
        0.010 + 0.001 * tokens as f64
    }

    #[test]
    fn the_budget_is_what_fits_in_the_tpot_target() {
        let p = SloPolicy::with_fixed_cost(targets(50), linear);
        // 10 + t <= 50 ms: 40 tokens.
        assert_eq!(p.step_budget(4, 2048), 40);
        assert_eq!(p.step_budget(4, 16), 16);
        assert!(p.admits(40) && !p.admits(41));
        assert_eq!(p.decode_cap(64), 40);
        // More decodes than fit: each still gets its token.
        assert_eq!(p.step_budget(60, 2048), 60);
    }

    #[test]
    fn without_a_target_or_a_curve_nothing_is_held_back() {
        let p = SloPolicy::new(targets(50));
        assert_eq!(p.step_budget(3, 2048), 2048);
        assert!(p.admits(1000));
        let p = SloPolicy::with_fixed_cost(SloTargets::default(), linear);
        assert_eq!(p.step_budget(3, 2048), 2048);
    }

    #[test]
    fn a_fixed_curve_does_not_learn_and_a_learning_one_does() {
        let mut p = SloPolicy::with_fixed_cost(targets(50), linear);
        p.observe(40, 1.0);
        assert_eq!(p.step_budget(0, 2048), 40);
        let mut p = SloPolicy::new(targets(50));
        p.observe(1, 0.011);
        p.observe(64, 0.074);
        assert!(p.step_budget(0, 2048) < 64);
    }
}
