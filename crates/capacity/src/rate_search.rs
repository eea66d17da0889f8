//! The search for the highest request rate that meets the SLO, shared by the measured sweep
//! (`pagoda bench --sweep`, each probe a run against the server) and the planner (each probe a
//! simulation): a doubling ladder up from a start rate until a rate fails (or halving down
//! until one passes), then bisection between the best passing and the lowest failing rate
//! until they are within `precision` of each other.

/// Where the search stands; ask [`RateSearch::next_rate`], run it, tell [`RateSearch::record`].
#[derive(Debug, Clone, PartialEq)]
pub struct RateSearch {
    start: f64,
    /// Relative gap between passing and failing rates at which the search stops.
    precision: f64,
    /// Probes left: every search stops by itself.
    budget: usize,
    /// Highest rate that met the SLO.
    pass: Option<f64>,
    /// Lowest rate that did not.
    fail: Option<f64>,
    /// Lowest rate worth probing: below it the answer is "no rate meets the SLO".
    floor: f64,
    /// Highest rate worth probing: a run of a few requests may meet the SLO even when they all
    /// arrive at once, and the ladder must stop somewhere.
    ceiling: f64,
}

impl RateSearch {
    /// A search starting at `start` requests/s, stopping when the bracket is within
    /// `precision` (e.g. 0.05 = 5%) or after `max_probes` probes.
    pub fn new(start: f64, precision: f64, max_probes: usize) -> Self {
        let start = if start.is_finite() && start > 0.0 {
            start
        } else {
            1.0
        };
        Self {
            start,
            precision: precision.max(1e-3),
            budget: max_probes.max(1),
            pass: None,
            fail: None,
            floor: start / 1024.0,
            ceiling: start * 1024.0,
        }
    }

    /// The next rate to probe, or `None` when the search is done.
    pub fn next_rate(&self) -> Option<f64> {
        if self.budget == 0 {
            return None;
        }
        match (self.pass, self.fail) {
            (None, None) => Some(self.start),
            (Some(p), None) => (p * 2.0 <= self.ceiling).then_some(p * 2.0),
            (None, Some(f)) => (f / 2.0 >= self.floor).then_some(f / 2.0),
            (Some(p), Some(f)) => (f / p - 1.0 > self.precision).then_some((p + f) / 2.0),
        }
    }

    /// Record the outcome of probing `rate`.
    pub fn record(&mut self, rate: f64, meets: bool) {
        self.budget = self.budget.saturating_sub(1);
        if meets {
            self.pass = Some(self.pass.map_or(rate, |p| p.max(rate)));
        } else {
            self.fail = Some(self.fail.map_or(rate, |f| f.min(rate)));
        }
    }

    /// The highest rate that met the SLO so far.
    pub fn best(&self) -> Option<f64> {
        self.pass
    }

    /// Whether the ladder reached its ceiling without a failing rate: every rate met the SLO.
    pub fn unbounded(&self) -> bool {
        self.fail.is_none() && self.pass.is_some_and(|p| p * 2.0 > self.ceiling)
    }

    /// The lowest rate that failed so far.
    pub fn lowest_failing(&self) -> Option<f64> {
        self.fail
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn search(capacity: f64, start: f64) -> (Option<f64>, usize) {
        let mut s = RateSearch::new(start, 0.05, 40);
        let mut probes = 0;
        while let Some(r) = s.next_rate() {
            probes += 1;
            s.record(r, r <= capacity);
        }
        (s.best(), probes)
    }

    #[test]
    fn brackets_the_capacity_from_below_and_above() {
        for (capacity, start) in [(3.3, 1.0), (0.2, 4.0), (50.0, 1.0)] {
            let (best, probes) = search(capacity, start);
            let best = best.unwrap_or(0.0);
            assert!(
                best <= capacity && best >= capacity / 1.05,
                "{capacity}: {best}"
            );
            assert!(probes < 20, "{probes} probes");
        }
        // Nothing passes: the search gives up at the floor; everything passes: at the ceiling.
        assert_eq!(search(0.0, 1.0).0, None);
        let mut s = RateSearch::new(1.0, 0.05, 40);
        while let Some(r) = s.next_rate() {
            s.record(r, true);
        }
        assert_eq!(s.best(), Some(1024.0));
        assert!(s.unbounded());
        // The budget stops it too.
        let mut s = RateSearch::new(1.0, 0.0, 3);
        for _ in 0..3 {
            let r = s.next_rate().unwrap_or(0.0);
            s.record(r, true);
        }
        assert_eq!((s.next_rate(), s.best()), (None, Some(4.0)));
    }
}
