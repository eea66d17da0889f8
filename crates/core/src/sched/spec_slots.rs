//! Speculation's share of a step: what budget the scheduler has left goes to decoding
//! sequences as slots for proposed tokens, as the controller's cost model chooses, never at the
//! cost of a preemption (a sequence whose extra blocks do not fit decodes one token).

use super::output::SchedulerOutput;
use super::scheduler::Scheduler;
use crate::kv::ComputedBlocks;
use crate::speculative::SpecCandidate;

impl Scheduler {
    /// Hands the step's leftover budget to decoding sequences as proposal slots, as the
    /// controller decides; a sequence whose extra blocks do not fit simply does not speculate.
    pub(super) fn add_speculation(&mut self, out: &mut SchedulerOutput, budget: usize) {
        let Some(spec) = self.spec.as_mut() else {
            return;
        };
        let max_model_len = self.config.max_model_len;
        let prior = spec.prior();
        let mut cands = Vec::new();
        let mut idx = Vec::new();
        for (i, s) in out.scheduled.iter().enumerate() {
            let Some(r) = self.requests.get(&s.seq_id) else {
                continue;
            };
            let decoding = s.num_scheduled_tokens == 1
                && r.num_computed_tokens + 1 == r.num_tokens()
                && r.num_output_tokens() > 0;
            let mut cap = r.tokens_left(max_model_len).saturating_sub(1);
            // The request's own cap (`"speculative"` in its body); 0 turns it off.
            if let Some(k) = r.params.num_speculative_tokens {
                cap = cap.min(k as usize);
            }
            if decoding && cap > 0 {
                cands.push(SpecCandidate {
                    seq_id: s.seq_id,
                    rate: r.acceptance.rate(prior),
                    cap,
                    lag: r.num_tokens().saturating_sub(r.draft_fed),
                    left: r.tokens_left(max_model_len),
                });
                idx.push(i);
            }
        }
        if cands.is_empty() {
            return;
        }
        let base_tokens = out.scheduled.iter().map(|s| s.num_scheduled_tokens).sum();
        let base_outputs = out
            .scheduled
            .iter()
            .filter(|s| {
                self.requests.get(&s.seq_id).is_some_and(|r| {
                    r.num_computed_tokens + s.num_scheduled_tokens >= r.num_tokens()
                })
            })
            .count();
        let ks = spec.choose(base_tokens, base_outputs, budget, &cands);
        for ((c, &i), k) in cands.iter().zip(&idx).zip(ks) {
            let Some(req) = self.requests.get_mut(&c.seq_id) else {
                continue;
            };
            if k == 0 {
                req.acceptance.fade();
                continue;
            }
            let req = &self.requests[&c.seq_id];
            let Some(extra) = self
                .kv
                .allocate_slots(req, 1 + k, &ComputedBlocks::default())
            else {
                // No blocks to spare: this step decodes one token.
                if let Some(spec) = self.spec.as_mut() {
                    spec.counters.num_unsupported += 1;
                }
                continue;
            };
            let s = &mut out.scheduled[i];
            for (ids, more) in s.block_ids.iter_mut().zip(extra) {
                ids.extend(more);
            }
            s.num_scheduled_tokens += k;
            s.num_spec_tokens = k;
        }
    }
}
