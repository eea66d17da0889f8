//! A discrete-event simulation of pagoda's scheduler under a workload, timed by the fitted
//! step-cost model: the rule of `core/src/sched/scheduler.rs` in miniature (running sequences
//! first, then waiting ones in arrival order, one token budget per step, a per-sequence
//! prefill cap, a sequence cap, KV blocks allocated as tokens are computed, the newest running
//! sequence preempted and recomputed when the pool is short). Deterministic: the same inputs
//! give the same numbers.

use crate::slo::{Slo, load_meets};
use crate::step_cost::{Pairs, StepCost, StepParts};
use crate::workload::SimRequest;

/// The scheduler settings simulated (the `pagoda serve` flags of the same names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedConfig {
    /// `--max-num-seqs`.
    pub max_num_seqs: usize,
    /// `--max-num-batched-tokens`.
    pub max_num_batched_tokens: usize,
    /// `--long-prefill-token-threshold` (0: no cap).
    pub long_prefill_token_threshold: usize,
    /// Blocks in the KV pool.
    pub num_blocks: usize,
    /// Tokens per block.
    pub block_size: usize,
    /// A decode replica of a disaggregated pair: every prompt's KV arrives computed (it holds
    /// blocks but costs no prefill; the step that follows computes the last prompt token).
    pub prefilled: bool,
}

/// The prompt prefix every request shares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SharedPrefix {
    /// Its length in tokens (0: none).
    pub tokens: usize,
    /// In the prefix cache before the first arrival (its blocks held by the cache from the
    /// start); otherwise the first request to compute it puts it there.
    pub cached: bool,
}

/// What one simulated run measured.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SimOutcome {
    /// Requests simulated.
    pub requests: usize,
    /// Requests that met every target.
    pub good: usize,
    /// First arrival to last finish, seconds.
    pub duration: f64,
    /// TTFT of every request, milliseconds, ascending.
    pub ttft_ms: Vec<f64>,
    /// TPOT of every request with more than one output token, milliseconds, ascending.
    pub tpot_ms: Vec<f64>,
    /// Where the steps' time went, summed.
    pub time: StepParts,
    /// Steps in which a request had arrived but could not start because the KV pool was full.
    pub kv_blocked_steps: usize,
    /// Steps in which a request had arrived but could not start because of `max_num_seqs`.
    pub seq_capped_steps: usize,
    /// Steps run.
    pub steps: usize,
    /// Preemptions (a running sequence's blocks taken back, to be recomputed).
    pub preemptions: usize,
    /// Most KV tokens held at once (the shared prefix once).
    pub peak_kv_tokens: usize,
    /// Most sequences running at once.
    pub peak_running: usize,
}

impl SimOutcome {
    /// Good requests per second of the run.
    pub fn goodput(&self) -> f64 {
        if self.duration > 0.0 {
            self.good as f64 / self.duration
        } else {
            0.0
        }
    }

    /// Whether the load met the SLO (the attainment rule of [`crate::slo`]).
    pub fn meets(&self) -> bool {
        load_meets(self.good, self.requests)
    }
}

/// The `q`-th percentile of ascending `sorted` (linear interpolation, as the bench reports).
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (q / 100.0).clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let (lo, hi) = (rank.floor() as usize, rank.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo as f64)
}

struct Seq {
    req: usize,
    /// Prompt tokens plus tokens generated so far.
    num_tokens: usize,
    num_computed_tokens: usize,
    generated: u32,
    /// Blocks this sequence holds (the shared prefix's are not its own).
    blocks: usize,
    /// It reads the cached shared prefix instead of holding its own copy.
    shares_prefix: bool,
    first_token_at: Option<f64>,
}

/// Simulate `requests` (arrival order) under `sched`, timing steps with `cost`; `shared` is
/// the prefix they share, a prefix-cache hit for every request once it is cached.
pub fn simulate(
    cost: &StepCost,
    sched: SchedConfig,
    requests: &[SimRequest],
    shared: SharedPrefix,
    slo: &Slo,
) -> SimOutcome {
    let bs = sched.block_size.max(1);
    // Only whole blocks are cached, and the last prompt token is always computed.
    let shared_blocks = (shared.tokens / bs).min(sched.num_blocks);
    let mut prefix_cached = shared.cached && shared_blocks > 0;
    let mut free_blocks = sched.num_blocks - if prefix_cached { shared_blocks } else { 0 };
    let mut out = SimOutcome {
        requests: requests.len(),
        ..SimOutcome::default()
    };
    let mut waiting: std::collections::VecDeque<Seq> = std::collections::VecDeque::new();
    let mut running: Vec<Seq> = Vec::new();
    let mut next_arrival = 0;
    let mut finished = 0;
    let mut now = 0.0f64;
    // Safety bound: a configuration that can never finish a request stops the loop.
    let max_steps = 50_000_000usize;
    while finished < requests.len() && out.steps < max_steps {
        while next_arrival < requests.len() && requests[next_arrival].arrival <= now {
            let r = &requests[next_arrival];
            waiting.push_back(Seq {
                req: next_arrival,
                num_tokens: r.prompt as usize,
                num_computed_tokens: 0,
                generated: 0,
                blocks: 0,
                shares_prefix: false,
                first_token_at: None,
            });
            next_arrival += 1;
        }
        if running.is_empty() && waiting.is_empty() {
            now = requests[next_arrival].arrival;
            continue;
        }
        let mut budget = sched.max_num_batched_tokens;
        let cap = |remaining: usize, budget: usize| {
            let mut n = remaining.min(budget);
            if sched.long_prefill_token_threshold > 0 && remaining > 1 {
                n = n.min(sched.long_prefill_token_threshold);
            }
            n
        };
        // (index in running, tokens this step)
        let mut scheduled: Vec<(usize, usize)> = Vec::new();
        let mut i = 0;
        while i < running.len() && budget > 0 {
            let s = &running[i];
            let n = cap(s.num_tokens - s.num_computed_tokens, budget);
            let need = (s.num_computed_tokens + n).div_ceil(bs);
            let own = need.saturating_sub(if s.shares_prefix { shared_blocks } else { 0 });
            let more = own.saturating_sub(s.blocks);
            if more > free_blocks {
                // Preempt the newest running sequence (maybe this one) and try again.
                let Some(mut victim) = running.pop() else {
                    break;
                };
                free_blocks += victim.blocks;
                victim.blocks = 0;
                victim.num_computed_tokens = 0;
                victim.shares_prefix = false;
                out.preemptions += 1;
                let gone = running.len();
                budget += scheduled
                    .iter()
                    .filter(|&&(j, _)| j == gone)
                    .map(|&(_, n)| n)
                    .sum::<usize>();
                scheduled.retain(|&(j, _)| j < gone);
                waiting.push_front(victim);
                continue;
            }
            free_blocks -= more;
            running[i].blocks += more;
            scheduled.push((i, n));
            budget -= n;
            i += 1;
        }
        let mut blocked_by_kv = false;
        while let Some(s) = waiting.front() {
            if budget == 0 || running.len() >= sched.max_num_seqs {
                if running.len() >= sched.max_num_seqs {
                    out.seq_capped_steps += 1;
                }
                break;
            }
            let hit = if prefix_cached { shared_blocks * bs } else { 0 };
            // A full hit still computes the last token (its logits are needed).
            let start = if sched.prefilled {
                s.num_tokens - 1
            } else {
                hit.min((s.num_tokens - 1) / bs * bs)
            };
            let n = cap(s.num_tokens - start, budget);
            let own = if sched.prefilled {
                (start + n).div_ceil(bs)
            } else {
                (start + n).div_ceil(bs) - start / bs
            };
            if own > free_blocks {
                blocked_by_kv = true;
                break;
            }
            let Some(mut s) = waiting.pop_front() else {
                break;
            };
            free_blocks -= own;
            s.blocks = own;
            s.num_computed_tokens = start;
            s.shares_prefix = start > 0 && !sched.prefilled;
            running.push(s);
            scheduled.push((running.len() - 1, n));
            budget -= n;
        }
        if blocked_by_kv {
            out.kv_blocked_steps += 1;
        }
        if scheduled.is_empty() {
            // Nothing fits (a request larger than the pool): it can never run.
            break;
        }
        let tokens: usize = scheduled.iter().map(|&(_, n)| n).sum();
        let attended = scheduled
            .iter()
            .map(|&(j, n)| Pairs::of_row(running[j].num_computed_tokens, n))
            .fold(Pairs::default(), Pairs::plus);
        let sampled = scheduled
            .iter()
            .filter(|&&(j, n)| running[j].num_computed_tokens + n == running[j].num_tokens)
            .count();
        let parts = cost.parts(tokens, attended, sampled);
        let dt = parts.total();
        out.time.weights += parts.weights;
        out.time.compute += parts.compute;
        out.time.kv_read += parts.kv_read;
        out.time.other += parts.other;
        now += dt;
        out.steps += 1;
        for &(j, n) in &scheduled {
            let s = &mut running[j];
            s.num_computed_tokens += n;
            if s.num_computed_tokens == s.num_tokens {
                if s.first_token_at.is_none() {
                    s.first_token_at = Some(now);
                }
                if shared_blocks > 0
                    && !prefix_cached
                    && s.num_computed_tokens >= shared_blocks * bs
                {
                    // The prefix's blocks now belong to the cache, not to this sequence.
                    prefix_cached = true;
                    s.blocks -= shared_blocks;
                    s.shares_prefix = true;
                }
                s.generated += 1;
                s.num_tokens += 1;
            }
        }
        out.peak_running = out.peak_running.max(running.len());
        out.peak_kv_tokens = out
            .peak_kv_tokens
            .max((sched.num_blocks - free_blocks) * bs);
        let mut k = 0;
        while k < running.len() {
            let s = &running[k];
            let r = &requests[s.req];
            if s.generated >= r.output {
                let s = running.remove(k);
                free_blocks += s.blocks;
                finished += 1;
                let first = s.first_token_at.unwrap_or(now);
                let ttft = (first - r.arrival) * 1e3;
                let tpot = (r.output > 1).then(|| (now - first) * 1e3 / f64::from(r.output - 1));
                let e2e = (now - r.arrival) * 1e3;
                out.ttft_ms.push(ttft);
                if let Some(t) = tpot {
                    out.tpot_ms.push(t);
                }
                if slo.is_met(Some(ttft), tpot, e2e) {
                    out.good += 1;
                }
            } else {
                k += 1;
            }
        }
    }
    out.duration = now;
    out.ttft_ms.sort_by(f64::total_cmp);
    out.tpot_ms.sort_by(f64::total_cmp);
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::profile::{CostProfile, DecodePoint, KvBytes, Machine, ModelInfo, PrefillPoint};

    /// A profile whose every step takes `flat` seconds up to `knee` tokens, then `slope`
    /// seconds per token more; attention, sampling and overhead free.
    pub(crate) fn synthetic(flat: f64, knee: usize, slope: f64) -> CostProfile {
        let at = |n: usize| flat + slope * n.saturating_sub(knee) as f64;
        CostProfile {
            version: crate::profile::PROFILE_VERSION,
            machine: Machine::default(),
            model: ModelInfo::default(),
            kv_cache_dtype: "f16".into(),
            kv_bytes_per_token: KvBytes {
                f32: 2048,
                f16: 1024,
                int8: 544,
            },
            kv_budget_bytes: 1 << 30,
            block_size: 16,
            prefill: [knee, 4096]
                .iter()
                .map(|&tokens| PrefillPoint {
                    tokens,
                    context: 0,
                    secs: at(tokens),
                })
                .collect(),
            decode: [1, knee]
                .iter()
                .flat_map(|&seqs| {
                    [0, 1000].map(|context| DecodePoint {
                        seqs,
                        context,
                        secs: at(seqs),
                    })
                })
                .collect(),
            sample_secs_per_seq: 0.0,
            step_overhead_secs: 0.0,
            served_decode: Vec::new(),
        }
    }

    fn sched(max_num_seqs: usize, num_blocks: usize) -> SchedConfig {
        SchedConfig {
            max_num_seqs,
            max_num_batched_tokens: 2048,
            long_prefill_token_threshold: 256,
            num_blocks,
            block_size: 16,
            prefilled: false,
        }
    }

    fn burst(n: usize, prompt: u32, output: u32) -> Vec<SimRequest> {
        (0..n)
            .map(|_| SimRequest {
                arrival: 0.0,
                prompt,
                output,
            })
            .collect()
    }

    #[test]
    fn steps_follow_the_scheduler_rule_exactly() {
        let cost = StepCost::fit(&synthetic(0.010, 64, 0.0));
        let slo = Slo::default();
        // Four at once, room for four: one prefill step, then ten decode steps of 10 ms.
        let out = simulate(
            &cost,
            sched(4, 100),
            &burst(4, 16, 11),
            SharedPrefix::default(),
            &slo,
        );
        assert_eq!(out.steps, 11);
        assert!((out.duration - 0.110).abs() < 1e-9);
        assert!(out.ttft_ms.iter().all(|&t| (t - 10.0).abs() < 1e-6));
        assert!(out.tpot_ms.iter().all(|&t| (t - 10.0).abs() < 1e-6));
        // Room for two: the second pair starts when the first finishes (step 12).
        let out = simulate(
            &cost,
            sched(2, 100),
            &burst(4, 16, 11),
            SharedPrefix::default(),
            &slo,
        );
        assert_eq!(out.steps, 22);
        assert_eq!(out.seq_capped_steps, 11);
        assert!((out.ttft_ms[3] - 120.0).abs() < 1e-6, "{:?}", out.ttft_ms);
        // Room for two requests' KV (20 + 11 tokens = 2 blocks each): the same, bound by blocks.
        let out = simulate(
            &cost,
            sched(64, 4),
            &burst(4, 20, 11),
            SharedPrefix::default(),
            &slo,
        );
        assert_eq!(out.steps, 22);
        assert_eq!((out.kv_blocked_steps, out.preemptions), (11, 0));
        // Blocks are taken as tokens are computed: four 16-token prompts fit at first, then
        // the newest sequences are preempted when decoding needs second blocks.
        let out = simulate(
            &cost,
            sched(64, 4),
            &burst(4, 16, 11),
            SharedPrefix::default(),
            &slo,
        );
        assert!(out.preemptions > 0);
        assert_eq!(out.peak_kv_tokens, 64);
        // A shared 32-token prefix: held once, read from the cache by every later request.
        let cost = StepCost::fit(&synthetic(0.010, 16, 0.001));
        let out = simulate(
            &cost,
            sched(64, 100),
            &burst(2, 40, 2),
            prefix(32, false),
            &slo,
        );
        // Step 1: both requests prefill all 40 tokens (nothing cached yet) = 80 tokens.
        assert!(
            (out.ttft_ms[0] - (10.0 + 64.0)).abs() < 1e-6,
            "{:?}",
            out.ttft_ms
        );
        // Cached before the first arrival: each computes only its own 8 tokens, 16 in one
        // step at the knee's 10 ms.
        let out = simulate(
            &cost,
            sched(64, 100),
            &burst(2, 40, 2),
            prefix(32, true),
            &slo,
        );
        assert!(
            out.ttft_ms.iter().all(|&t| (t - 10.0).abs() < 1e-6),
            "{:?}",
            out.ttft_ms
        );
        // The cache's two blocks are not the sequences' to use: with three blocks in all, the
        // two requests (one block each) run one after the other.
        let out = simulate(
            &cost,
            sched(64, 3),
            &burst(2, 40, 2),
            prefix(32, true),
            &slo,
        );
        assert_eq!(out.kv_blocked_steps, 2, "{out:?}");
    }

    fn prefix(tokens: usize, cached: bool) -> SharedPrefix {
        SharedPrefix { tokens, cached }
    }
}
