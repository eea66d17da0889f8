//! One sequence's acceptance estimate: the probability that a proposed token is accepted given
//! that the ones before it were. Acceptance runs are geometric, so the estimate is accepted
//! tokens over attempts (accepted + the one rejection that ends a short run), with decayed
//! counts so a sequence that changes character (prose, then code) is followed within a few
//! rounds, and a prior that pulls a quiet sequence back toward the engine-wide rate.

/// Weight of the prior, in attempts.
const PRIOR_WEIGHT: f64 = 2.0;
/// Each round keeps this share of the older evidence.
const DECAY: f64 = 0.85;

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Acceptance {
    accepted: f64,
    attempts: f64,
}

impl Acceptance {
    /// Records a round: `asked` tokens were allowed, `accepted` of them were (a proposer that
    /// proposed fewer than asked failed at the first missing one).
    pub fn record(&mut self, asked: usize, accepted: usize) {
        if asked == 0 {
            return;
        }
        let failed = usize::from(accepted < asked);
        self.accepted = self.accepted * DECAY + accepted as f64;
        self.attempts = self.attempts * DECAY + (accepted + failed) as f64;
    }

    /// A step without speculation: the evidence fades, so the prior can bring it back.
    pub fn fade(&mut self) {
        self.accepted *= DECAY;
        self.attempts *= DECAY;
    }

    /// The estimate, pulled toward `prior` (the engine's running rate) while evidence is thin.
    pub fn rate(&self, prior: f64) -> f64 {
        ((self.accepted + PRIOR_WEIGHT * prior) / (self.attempts + PRIOR_WEIGHT)).clamp(0.0, 0.99)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_the_evidence_and_fades_back_to_the_prior() {
        let mut a = Acceptance::default();
        assert!((a.rate(0.5) - 0.5).abs() < 1e-9);
        for _ in 0..20 {
            a.record(4, 4);
        }
        assert!(a.rate(0.5) > 0.9, "{}", a.rate(0.5));
        for _ in 0..40 {
            a.record(4, 0);
        }
        assert!(a.rate(0.5) < 0.15, "{}", a.rate(0.5));
        for _ in 0..60 {
            a.fade();
        }
        assert!((a.rate(0.5) - 0.5).abs() < 0.05, "{}", a.rate(0.5));
    }
}
