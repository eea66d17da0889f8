//! Choosing each sequence's number of speculative tokens for a step. With a fixed K every
//! decoding sequence gets K. With `auto`, each sequence's K follows its own acceptance and the
//! measured step-cost curve: slots go to the proposals most likely to be accepted (rate^(k+1)
//! for a sequence's (k+1)-th) and the batch keeps as many as maximise its expected tokens per
//! second, every slot costing one more row of the shared step: long proposals where acceptance
//! is high, none where it is low, and K = 0 for everyone on a busy, compute-bound batch.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::config::{NumSpecTokens, SpecConfig, SpecMethod};
use super::cost_model::StepCostModel;
use crate::executor::DraftWork;
use crate::request::SeqId;

/// A decoding sequence that may speculate this step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SpecCandidate {
    pub seq_id: SeqId,
    /// Its acceptance estimate.
    pub rate: f64,
    /// The most it may propose (what is left of `max_tokens` and of the context, minus one).
    pub cap: usize,
    /// Tokens a draft model must feed before it can propose for it (1-2 while it keeps up;
    /// the whole context for a sequence that never speculated).
    pub lag: usize,
    /// Output tokens it has left, over which a catch-up would pay for itself.
    pub left: usize,
}

/// Speculation counters since start, with vLLM's meanings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpecCounters {
    /// Rounds in which a sequence had at least one token proposed.
    pub num_drafts: u64,
    pub num_draft_tokens: u64,
    pub num_accepted_tokens: u64,
    /// Accepted tokens by position in their run (0 = first proposed token).
    pub accepted_per_pos: Vec<u64>,
    /// How often each K (index) was chosen for a decoding sequence.
    pub chosen_k: Vec<u64>,
    /// Sequences chosen to speculate whose extra KV blocks did not fit; they decoded one token.
    pub num_unsupported: u64,
}

/// The scheduler's speculation policy and what it learned.
#[derive(Clone, Debug)]
pub struct SpecController {
    config: SpecConfig,
    target: StepCostModel,
    /// Seconds of one draft-model forward against the sequences in it.
    draft: StepCostModel,
    /// Seconds per token of a draft catching up on a sequence it lags (learned).
    catch_up: Option<f64>,
    /// Engine-wide acceptance (accepted over attempts), the prior of new sequences.
    global_accepted: f64,
    global_attempts: f64,
    pub counters: SpecCounters,
}

/// The engine-wide acceptance before any round: optimistic, as a first try costs only one
/// verification.
const PRIOR_RATE: f64 = 0.6;
/// What [`PRIOR_RATE`] weighs, in attempts. A sequence that does not speculate teaches
/// nothing, so a prior that a few unlucky first rounds pull below the break-even rate turns
/// speculation off for good: a draft model on chat (acceptance ~0.63, in bursts) opened with 1
/// of 6 accepted and then proposed nothing on the next request (one attempt's weight).
/// Twenty attempts are what a proposer that is really poor costs before the prior says so.
const PRIOR_ATTEMPTS: f64 = 20.0;

/// A draft this close behind a sequence is in step with it: a verification leaves it the
/// last proposal and the target's own token to feed.
const IN_STEP_LAG: usize = 2;

/// Catch-ups shorter than this are mostly a forward's fixed cost: they do not teach the
/// per-token cost.
const MIN_CATCH_UP_SAMPLE: usize = 16;

#[derive(PartialEq)]
struct Gain {
    gain: f64,
    idx: usize,
}

impl Eq for Gain {}

impl PartialOrd for Gain {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Gain {
    fn cmp(&self, other: &Self) -> Ordering {
        self.gain
            .total_cmp(&other.gain)
            .then(other.idx.cmp(&self.idx))
    }
}

impl SpecController {
    pub fn new(config: SpecConfig) -> Self {
        let max = config.num_speculative_tokens.max();
        Self {
            config,
            target: StepCostModel::default(),
            draft: StepCostModel::default(),
            catch_up: None,
            global_accepted: 0.0,
            global_attempts: 0.0,
            counters: SpecCounters {
                accepted_per_pos: vec![0; max],
                chosen_k: vec![0; max + 1],
                ..Default::default()
            },
        }
    }

    pub fn config(&self) -> &SpecConfig {
        &self.config
    }

    /// The acceptance of a sequence with no history of its own: the engine's, starting from
    /// an optimistic [`PRIOR_RATE`] worth [`PRIOR_ATTEMPTS`] attempts.
    pub fn prior(&self) -> f64 {
        (self.global_accepted + PRIOR_RATE * PRIOR_ATTEMPTS)
            / (self.global_attempts + PRIOR_ATTEMPTS)
    }

    /// K for each candidate (same order). `base_tokens` are the step's tokens without
    /// speculation, `base_outputs` the tokens it samples, `budget` the tokens left to hand out.
    pub fn choose(
        &mut self,
        base_tokens: usize,
        base_outputs: usize,
        budget: usize,
        cands: &[SpecCandidate],
    ) -> Vec<usize> {
        let mut ks = vec![0; cands.len()];
        let mut left = budget;
        match self.config.num_speculative_tokens {
            NumSpecTokens::Fixed(k) => {
                for (c, slot) in cands.iter().zip(&mut ks) {
                    let give = k.min(c.cap).min(left);
                    *slot = give;
                    left -= give;
                }
            }
            NumSpecTokens::Auto { max } => {
                self.choose_auto(base_tokens, base_outputs, left, max, cands, &mut ks)
            }
        }
        for &k in &ks {
            if let Some(c) = self.counters.chosen_k.get_mut(k) {
                *c += 1;
            }
        }
        ks
    }

    /// `auto`: proposal slots are offered in order of their acceptance probability (a
    /// sequence's (k+1)-th slot is worth `rate^(k+1)` expected tokens), and the batch keeps the
    /// prefix of that order with the most expected tokens per second of predicted step time.
    /// Without a draft model the step's cost depends only on its total tokens, and for a given
    /// total the first slots of that order are the most valuable ones, so the best prefix is
    /// the best choice there is: it is the argmax over all K per sequence, not the first K at
    /// which one more token stops paying (a step-cost curve with a bump, such as kernels that
    /// tile rows by 4, can make 1 extra token a loss and 3 a gain).
    fn choose_auto(
        &self,
        base_tokens: usize,
        base_outputs: usize,
        mut left: usize,
        max: usize,
        cands: &[SpecCandidate],
        ks: &mut [usize],
    ) {
        if !self.target.is_known() {
            return; // no measured cost curve yet: never speculate blind
        }
        let uses_draft = matches!(self.config.method, SpecMethod::DraftModel { .. });
        let mut heap: BinaryHeap<Gain> = cands
            .iter()
            .enumerate()
            .filter(|(_, c)| c.cap > 0)
            .map(|(idx, c)| Gain { gain: c.rate, idx })
            .collect();
        let mut tokens = base_tokens;
        let mut expected = base_outputs.max(1) as f64;
        let mut kmax = 0usize;
        let mut drafting = 0usize;
        let cost = |tokens: usize, kmax: usize, drafting: usize| {
            let mut c = self.target.predict(tokens);
            if uses_draft && kmax > 0 {
                c += kmax as f64 * self.draft.predict(drafting);
            }
            c
        };
        // A draft that lags a sequence is worth catching up only where a sequence in step with
        // its draft would go on speculating, in a decode of this step's sequences: else the
        // catch-up buys proposals for this one step (a big prefill step makes a slot look
        // nearly free) and none after.
        let steady = base_outputs.max(cands.len());
        let keeps_speculating = |rate: f64| {
            (steady as f64 + rate) * cost(steady, 0, 0) > steady as f64 * cost(steady + 1, 1, 1)
        };
        // Catch-ups of the slots taken so far: paid once, each charged as its share (below).
        let mut charged = 0.0;
        let mut now = cost(tokens, kmax, drafting);
        // The slots taken so far, in order, and the best prefix of them.
        let mut taken: Vec<usize> = Vec::new();
        let (mut best_len, mut best_rate) = (0usize, expected / now);
        let mut counts = vec![0usize; cands.len()];
        while left > 0
            && let Some(Gain { gain, idx }) = heap.pop()
        {
            let k = counts[idx];
            let (kmax2, drafting2) = (kmax.max(k + 1), drafting + usize::from(k == 0));
            let lagging = uses_draft && k == 0 && cands[idx].lag > IN_STEP_LAG;
            if lagging && !keeps_speculating(cands[idx].rate) {
                continue;
            }
            let catch_up = if lagging {
                self.catch_up_share(&cands[idx], gain)
            } else {
                0.0
            };
            let next = cost(tokens + 1, kmax2, drafting2) + charged + catch_up;
            // A draft model's cost also grows with the deepest proposal and the sequences
            // drafting: a slot that raises either without paying at once is passed over.
            if uses_draft && (expected + gain) * now <= expected * next {
                if kmax2 > kmax || drafting2 > drafting {
                    continue;
                }
                break;
            }
            counts[idx] = k + 1;
            taken.push(idx);
            expected += gain;
            tokens += 1;
            left -= 1;
            charged += catch_up;
            (kmax, drafting, now) = (kmax2, drafting2, next);
            if expected / now > best_rate {
                (best_len, best_rate) = (taken.len(), expected / now);
            }
            let c = &cands[idx];
            if k + 1 < c.cap.min(max) {
                heap.push(Gain {
                    gain: gain * c.rate,
                    idx,
                });
            }
        }
        for &idx in &taken[..best_len] {
            ks[idx] += 1;
        }
    }

    /// What starting `c` costs this step when its draft lags: the draft must first feed the
    /// `lag` tokens it has not seen (a prefill of the draft), which pays off only over the
    /// tokens the sequence has left, so the step carries the share of it that its own
    /// expected tokens (`1 + gain`) are of those. A long context with few tokens left (a wave
    /// of requests thinning out) is not worth a draft prefill; a fresh request with a short
    /// prompt and many tokens to go is.
    fn catch_up_share(&self, c: &SpecCandidate, gain: f64) -> f64 {
        if c.lag <= IN_STEP_LAG {
            return 0.0;
        }
        // Until a catch-up has been timed, a draft forward of 16 sequences' tokens stands in.
        let per_token = self.catch_up.unwrap_or_else(|| {
            if self.draft.is_known() {
                self.draft.predict(16) / 16.0
            } else {
                0.0
            }
        });
        per_token * c.lag as f64 * (1.0 + gain) / c.left.max(1) as f64
    }

    /// A step of `tokens` computed tokens took `secs` seconds, of which `draft` was
    /// draft-model work. Only the draft's forwards in step with the target teach its curve: a
    /// catch-up over a sequence's earlier tokens is paid once, not per proposal.
    pub fn observe_step(&mut self, tokens: usize, secs: f64, draft: Option<DraftWork>) {
        let mut target_secs = secs;
        if let Some(d) = draft {
            if d.forwards > 0 {
                self.draft.observe(d.seqs, d.seconds / d.forwards as f64);
            }
            if d.catch_up_tokens >= MIN_CATCH_UP_SAMPLE {
                let per_token = d.catch_up_seconds / d.catch_up_tokens as f64;
                self.catch_up = Some(match self.catch_up {
                    Some(old) => 0.8 * old + 0.2 * per_token,
                    None => per_token,
                });
            }
            target_secs -= d.total_seconds;
        }
        self.target.observe(tokens, target_secs);
    }

    /// Seeds the cost curves from start-up measurements: `(tokens, seconds)` of target steps,
    /// and of single draft forwards against their sequences.
    pub fn calibrate(&mut self, target: &[(usize, f64)], draft: &[(usize, f64)]) {
        for &(t, s) in target {
            self.target.observe(t, s);
        }
        for &(t, s) in draft {
            self.draft.observe(t, s);
        }
    }

    /// One sequence's round: `asked` tokens allowed, `proposed` of them proposed, `accepted`.
    pub fn record(&mut self, asked: usize, proposed: usize, accepted: usize) {
        if asked == 0 {
            return;
        }
        if proposed == 0 {
            // Nothing to verify (no n-gram match, say): not a draft, but a failed attempt.
            self.global_attempts += 1.0;
            return;
        }
        let c = &mut self.counters;
        c.num_drafts += 1;
        c.num_draft_tokens += proposed as u64;
        c.num_accepted_tokens += accepted as u64;
        for pos in 0..accepted {
            if let Some(n) = c.accepted_per_pos.get_mut(pos) {
                *n += 1;
            }
        }
        self.global_accepted = self.global_accepted * 0.999 + accepted as f64;
        self.global_attempts =
            self.global_attempts * 0.999 + (accepted + usize::from(accepted < asked)) as f64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn controller(k: NumSpecTokens, cost: &[(usize, f64)]) -> SpecController {
        let mut c = SpecController::new(SpecConfig {
            method: SpecMethod::Suffix,
            num_speculative_tokens: k,
        });
        c.calibrate(cost, &[]);
        c
    }

    fn cand(seq_id: u64, rate: f64) -> SpecCandidate {
        SpecCandidate {
            seq_id,
            rate,
            cap: 100,
            lag: 1,
            left: 100,
        }
    }

    /// A CPU-like curve: flat to 16 tokens, then linear.
    const CURVE: &[(usize, f64)] = &[
        (1, 0.020),
        (4, 0.0205),
        (16, 0.022),
        (64, 0.080),
        (256, 0.320),
    ];

    #[test]
    fn a_lone_sequence_speculates_deep_when_tokens_are_free() {
        let mut c = controller(NumSpecTokens::Auto { max: 8 }, CURVE);
        assert_eq!(c.choose(1, 1, 100, &[cand(0, 0.9)]), vec![8]);
        // A poor acceptance still earns a token or two on the flat part, not eight.
        let k = c.choose(1, 1, 100, &[cand(0, 0.2)])[0];
        assert!((1..=2).contains(&k), "{k}");
    }

    /// Qwen2.5-Coder-1.5B's verify-step curve after issue 39's kernels (T(5)/T(1) = 1.44,
    /// T(9)/T(1) = 2.33; docs/benchmarks.md), in seconds.
    const QWEN: &[(usize, f64)] = &[(1, 0.036), (2, 0.041), (5, 0.052), (9, 0.084), (16, 0.140)];

    #[test]
    fn a_lone_sequence_gets_the_k_that_maximises_tokens_per_second() {
        // Expected tokens (1 + r + ... + r^K) over T(1 + K), interpolated on QWEN; e.g. at
        // r = 0.9: K=3 3.44/0.0483 = 71.1, K=4 4.10/0.0520 = 78.8, K=5 4.69/0.0600 = 78.1.
        let mut c = controller(NumSpecTokens::Auto { max: 8 }, QWEN);
        for (rate, k) in [
            (0.95, 6), // 88.7/s against 88.3 at K=5 and 88.6 at K=7
            (0.9, 4),
            (0.6, 3), // 45.0 against 43.9 at K=2 and 44.3 at K=4
            (0.4, 2),
            (0.2, 1),  // 1.2/0.041 = 29.3 against 1/0.036 = 27.8
            (0.12, 0), // 1.12/0.041 = 27.3: a token that costs more than it brings
        ] {
            assert_eq!(
                c.choose(1, 1, 100, &[cand(0, rate)]),
                vec![k],
                "rate {rate}"
            );
        }
    }

    #[test]
    fn a_bump_in_the_curve_does_not_stop_the_search() {
        // One extra row costs 60% more, three cost 65% (rows tiled by 4): at r = 0.5, K=1 loses
        // (1.5/1.6 = 0.94 per unit) but K=3 wins (1.875/1.65 = 1.14).
        let stair: &[(usize, f64)] = &[(1, 1.0), (2, 1.6), (4, 1.65), (8, 3.2)];
        let mut c = controller(NumSpecTokens::Auto { max: 8 }, stair);
        assert_eq!(c.choose(1, 1, 100, &[cand(0, 0.5)]), vec![3]);
        // At r = 0.3 no K pays (K=3: 1.417/1.65 = 0.86).
        assert_eq!(c.choose(1, 1, 100, &[cand(0, 0.3)]), vec![0]);
    }

    #[test]
    fn each_request_in_a_batch_gets_its_own_k() {
        // Three decoding sequences share a step (T(3) = 44.7 ms). The best of all 9^3 choices
        // of K on QWEN (a brute-force search: 96.4 expected tokens per second) is 5 slots for
        // the confident one, 1 for the middling one (its 0.8 comes after 0.95^4 = 0.81 and
        // before 0.95^5 = 0.77), none for the poor one, whose 0.1 is worth less than its row.
        let mut c = controller(NumSpecTokens::Auto { max: 8 }, QWEN);
        let ks = c.choose(3, 3, 100, &[cand(0, 0.95), cand(1, 0.1), cand(2, 0.8)]);
        assert_eq!(ks, vec![5, 0, 1]);
        // Alone, the confident one would take 6: the others' rows make its sixth not pay.
        assert_eq!(c.choose(1, 1, 100, &[cand(0, 0.95)]), vec![6]);
    }

    #[test]
    fn a_busy_batch_turns_speculation_off_by_itself() {
        let mut c = controller(NumSpecTokens::Auto { max: 8 }, CURVE);
        let cands: Vec<_> = (0..64).map(|i| cand(i, 0.7)).collect();
        let ks = c.choose(64, 64, 1000, &cands);
        assert!(ks.iter().all(|&k| k == 0), "{ks:?}");
        // Eight streams on the flat part share the free tokens, best rates first.
        let mut cands: Vec<_> = (0..8).map(|i| cand(i, 0.3)).collect();
        cands[3].rate = 0.9;
        let ks = c.choose(8, 8, 1000, &cands);
        assert!(ks[3] >= ks[0] && ks[3] > 0, "{ks:?}");
        assert!(ks.iter().sum::<usize>() + 8 <= 24, "{ks:?}");
    }

    /// A draft model behind a sequence must first feed what it has not seen: `auto` starts it
    /// only where the catch-up pays over the tokens the sequence has left.
    #[test]
    fn a_lagging_draft_starts_only_where_its_catch_up_pays() {
        let mut c = SpecController::new(SpecConfig {
            method: SpecMethod::DraftModel {
                path: "draft.gguf".into(),
            },
            num_speculative_tokens: NumSpecTokens::Auto { max: 4 },
        });
        // The draft: 10 ms a forward of one sequence, 32 ms of 16 (2 ms a token until a
        // catch-up is timed).
        c.calibrate(QWEN, &[(1, 0.010), (16, 0.032)]);
        let with = |lag, left| SpecCandidate {
            lag,
            left,
            ..cand(0, 0.7)
        };
        // In step: K = 1 brings 1.7 tokens in 41 + 10 ms (33/s against 27.8/s plain).
        assert!(c.choose(1, 1, 100, &[with(1, 100)])[0] >= 1);
        // A fresh request (a 60-token prompt, 300 tokens to go): 0.7 ms of catch-up a step.
        assert!(c.choose(1, 1, 100, &[with(60, 300)])[0] >= 1);
        // 150 tokens behind with 20 left: 25.5 ms a step, 1.7 / 76.5 ms = 22/s: plain wins.
        assert_eq!(c.choose(1, 1, 100, &[with(150, 20)]), vec![0]);
        // 150 behind with 100 left pays at 2 ms a token (5.1 ms a step), not at the 10 ms a
        // token a timed catch-up then shows (25.5 ms).
        assert!(c.choose(1, 1, 100, &[with(150, 100)])[0] >= 1);
        let work = DraftWork {
            forwards: 0,
            seqs: 0,
            seconds: 0.0,
            total_seconds: 1.0,
            catch_up_tokens: 100,
            catch_up_seconds: 1.0,
        };
        c.observe_step(1, 1.036, Some(work));
        assert_eq!(c.choose(1, 1, 100, &[with(150, 100)]), vec![0]);
        // A big prefill step makes a slot nearly free (8 ms of a 2.4 s step for 0.7/16 more
        // tokens), but at a decode of its 16 sequences a slot would not pay (T(17) + 10 ms
        // for 16.7 tokens against T(16) for 16): a lagging draft is not started there, while
        // a sequence in step takes the slot.
        assert_eq!(c.choose(300, 16, 100, &[with(65, 128)]), vec![0]);
        assert!(c.choose(300, 16, 100, &[with(1, 128)])[0] >= 1);
        // Token proposers have no draft to catch up: the lag is not theirs to pay.
        let mut suffix = controller(NumSpecTokens::Auto { max: 4 }, QWEN);
        assert!(suffix.choose(1, 1, 100, &[with(150, 20)])[0] >= 1);
    }

    #[test]
    fn fixed_k_respects_caps_and_the_budget() {
        let mut c = controller(NumSpecTokens::Fixed(4), &[]);
        let mut a = cand(0, 0.1);
        a.cap = 2;
        assert_eq!(
            c.choose(2, 2, 5, &[a, cand(1, 0.1), cand(2, 0.1)]),
            vec![2, 3, 0]
        );
        assert_eq!(c.counters.chosen_k, vec![1, 0, 1, 1, 0]);
    }

    #[test]
    fn unmeasured_cost_means_no_speculation() {
        let mut c = controller(NumSpecTokens::Auto { max: 8 }, &[]);
        assert_eq!(c.choose(1, 1, 100, &[cand(0, 0.99)]), vec![0]);
    }

    #[test]
    fn counters_follow_rounds() {
        let mut c = controller(NumSpecTokens::Fixed(3), &[]);
        c.record(3, 3, 2);
        c.record(3, 0, 0);
        c.record(3, 2, 2);
        assert_eq!(c.counters.num_drafts, 2);
        assert_eq!(c.counters.num_draft_tokens, 5);
        assert_eq!(c.counters.num_accepted_tokens, 4);
        assert_eq!(c.counters.accepted_per_pos, vec![2, 2, 0]);
    }
}
