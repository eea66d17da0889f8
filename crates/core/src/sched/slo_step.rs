//! The scheduler's side of the SLO policy (`crate::slo`): the step budget it plans with, the
//! steps it learns the cost curve from, and the load it publishes for the door's prediction.

use super::scheduler::Scheduler;
use crate::request::SeqId;
use crate::slo::{SloLoad, SloPolicy};

impl Scheduler {
    /// Turns the SLO policy on.
    pub fn set_slo(&mut self, policy: SloPolicy) {
        self.slo = Some(policy);
    }

    pub fn slo(&self) -> Option<&SloPolicy> {
        self.slo.as_ref()
    }

    /// Records a step of `tokens` computed tokens that took `secs`.
    pub fn observe_step(&mut self, tokens: usize, secs: f64) {
        if let Some(slo) = self.slo.as_mut() {
            slo.observe(tokens, secs);
        }
    }

    /// Whether `seq` has one token left to compute (it decodes this step).
    pub(super) fn is_decoding(&self, seq: SeqId) -> bool {
        self.requests
            .get(&seq)
            .is_some_and(|r| r.num_computed_tokens + 1 >= r.num_tokens())
    }

    fn num_decoding(&self) -> usize {
        self.running
            .iter()
            .filter(|&&s| self.is_decoding(s))
            .count()
    }

    /// This step's token budget, and the tokens of it kept for decodes: the configured budget
    /// and none without the SLO policy.
    pub(super) fn step_budget(&self) -> (usize, usize) {
        let max = self.config.max_num_batched_tokens;
        match &self.slo {
            None => (max, 0),
            Some(slo) => {
                let decodes = self.num_decoding();
                (slo.step_budget(decodes, max), decodes)
            }
        }
    }

    /// The load the door predicts from (`None` without the SLO policy).
    pub fn slo_load(&self) -> Option<SloLoad> {
        let slo = self.slo.as_ref()?;
        let max = self.config.max_num_batched_tokens;
        let decodes = self.num_decoding();
        let budget = slo.step_budget(decodes, max);
        let mut backlog_tokens = 0;
        let mut finishes = Vec::with_capacity(self.running.len());
        for r in self.requests.values() {
            // Tokens to compute before its first (or, once preempted, next) token; a decode's
            // one token is not backlog.
            let left = r.num_tokens().saturating_sub(r.num_computed_tokens);
            if left > 1 {
                backlog_tokens += left;
            }
        }
        // A step holds the prefill chunks too while there are any: it lasts the whole budget.
        let step = slo.step_secs(if backlog_tokens > 0 {
            budget
        } else {
            decodes.max(1)
        });
        if let Some(step) = step {
            for s in &self.running {
                if let Some(r) = self.requests.get(s) {
                    let left = (r.params.max_tokens as usize).saturating_sub(r.num_output_tokens());
                    finishes.push(left as f64 * step);
                }
            }
        }
        finishes.sort_by(f64::total_cmp);
        Some(SloLoad {
            backlog_tokens,
            seqs: self.requests.len(),
            decode_cap: slo
                .decode_cap(self.config.max_num_seqs)
                .min(self.config.max_num_seqs),
            step_tokens: budget,
            cost: slo.cost().cloned(),
            finishes,
        })
    }
}
