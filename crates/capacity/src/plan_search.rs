//! One planning context: the fitted step cost, the workload, the SLO and the KV pool, and the
//! two operations the planner repeats for every setting: simulate one rate, and search for the
//! highest rate that meets the SLO.

use crate::plan_types::{PlanOptions, Settings};
use crate::rate_search::RateSearch;
use crate::simulate::{SchedConfig, SharedPrefix, SimOutcome, simulate};
use crate::slo::Slo;
use crate::step_cost::StepCost;
use crate::workload::Workload;

/// The fitted model and everything fixed across the search.
pub(crate) struct Ctx<'a> {
    pub(crate) cost: StepCost,
    pub(crate) workload: &'a Workload,
    pub(crate) slo: &'a Slo,
    pub(crate) opts: &'a PlanOptions,
    pub(crate) num_blocks: usize,
    pub(crate) block_size: usize,
    /// Simulate a decode-only replica (prompts arrive computed).
    pub(crate) prefilled: bool,
}

impl Ctx<'_> {
    pub(crate) fn run(
        &self,
        settings: Settings,
        workload: &Workload,
        slo: &Slo,
        rate: f64,
    ) -> SimOutcome {
        let requests = workload.requests(rate, self.opts.num_requests, self.opts.seed);
        let sched = SchedConfig {
            max_num_seqs: settings.max_num_seqs,
            max_num_batched_tokens: settings.max_num_batched_tokens,
            long_prefill_token_threshold: settings.long_prefill_token_threshold,
            num_blocks: self.num_blocks,
            block_size: self.block_size,
            prefilled: self.prefilled,
        };
        simulate(
            &self.cost,
            sched,
            &requests,
            SharedPrefix {
                tokens: workload.shared_prefix_tokens as usize,
                cached: workload.shared_prefix_cached,
            },
            slo,
        )
    }

    /// The highest rate meeting `slo` for `workload`, and the run at that rate.
    pub(crate) fn search(
        &self,
        settings: Settings,
        workload: &Workload,
        slo: &Slo,
        start: f64,
    ) -> Option<(f64, SimOutcome)> {
        let mut search = RateSearch::new(start, 0.02, 40);
        let mut best: Option<(f64, SimOutcome)> = None;
        while let Some(rate) = search.next_rate() {
            let outcome = self.run(settings, workload, slo, rate);
            let meets = outcome.meets();
            search.record(rate, meets);
            if meets && best.as_ref().is_none_or(|(r, _)| rate > *r) {
                best = Some((rate, outcome));
            }
        }
        best
    }
}
