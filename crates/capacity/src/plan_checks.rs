//! The planner's reasoning steps around the simulation: whether one request alone can meet
//! the SLO (and which resource says no), which resource binds at the highest rate, and the
//! replica counts for a target rate, co-located and disaggregated.

use crate::plan_search::Ctx;
use crate::plan_types::{DEFAULTS, PlanError, Replicas, Resource, Settings};
use crate::simulate::{SimOutcome, percentile};
use crate::slo::Slo;
use crate::step_cost::{Pairs, StepCost, StepParts};
use crate::workload::{Length, Workload};

/// Memory bandwidth when streaming weights and cached K/V take more of the time than the
/// matmul work above that floor, else compute.
fn dominant(p: &StepParts) -> Resource {
    if p.weights + p.kv_read >= p.compute {
        Resource::MemoryBandwidth
    } else {
        Resource::Compute
    }
}

fn add(a: &mut StepParts, b: StepParts) {
    a.weights += b.weights;
    a.compute += b.compute;
    a.kv_read += b.kv_read;
    a.other += b.other;
}

/// Refuse a workload that misses the SLO with one request on an idle replica, naming the
/// resource that binds; on success note the idle latencies in `reasoning`.
pub(crate) fn check_attainable(
    cost: &StepCost,
    w: &Workload,
    slo: &Slo,
    kv_tokens: usize,
    reasoning: &mut Vec<String>,
) -> Result<(), PlanError> {
    let own = w.max_own_tokens() + u64::from(w.shared_prefix_tokens);
    if own > kv_tokens as u64 {
        return Err(PlanError::Unattainable {
            resource: Resource::KvMemory,
            reason: format!(
                "one request holds up to {own} tokens of KV but the pool holds {kv_tokens}; \
                 give --kv-cache-memory more or use --kv-cache-dtype int8"
            ),
        });
    }
    let prompt = w.prompt_tokens.mean().round() as usize;
    let output = w.output_tokens.mean().round().max(1.0) as usize;
    let cached = if w.shared_prefix_tokens > 0 {
        w.shared_prefix_tokens as usize
    } else {
        0
    };
    let chunk = DEFAULTS.long_prefill_token_threshold;
    let mut prefill = StepParts::default();
    let mut done = cached.min(prompt.saturating_sub(1));
    while done < prompt {
        let n = chunk.min(prompt - done);
        add(&mut prefill, cost.parts(n, Pairs::of_row(done, n), 1));
        done += n;
    }
    let ttft_ms = prefill.total() * 1e3;
    let decode = cost.parts(
        1,
        Pairs::of_row((prompt + output / 2).saturating_sub(1), 1),
        1,
    );
    let tpot_ms = decode.total() * 1e3;
    reasoning.push(format!(
        "one request alone: prefill of {} uncached tokens {ttft_ms:.0} ms, decode {tpot_ms:.1} \
         ms per token",
        prompt - cached.min(prompt.saturating_sub(1))
    ));
    let fail =
        |resource: Resource, reason: String| Err(PlanError::Unattainable { resource, reason });
    if let Some(limit) = slo.ttft_ms.filter(|&l| ttft_ms > l) {
        return fail(
            dominant(&prefill),
            format!(
                "one request's prefill takes {ttft_ms:.0} ms on an idle replica, over the TTFT \
                 target of {limit} ms (matmul {:.0} ms, weight streaming {:.0} ms, KV reads {:.0} ms)",
                prefill.compute * 1e3,
                prefill.weights * 1e3,
                prefill.kv_read * 1e3
            ),
        );
    }
    if let Some(limit) = slo.tpot_ms.filter(|&l| tpot_ms > l) {
        return fail(
            dominant(&decode),
            format!(
                "one decode step of one request takes {tpot_ms:.1} ms on an idle replica, over \
                 the TPOT target of {limit} ms (weight streaming {:.1} ms, KV reads {:.1} ms)",
                decode.weights * 1e3,
                decode.kv_read * 1e3
            ),
        );
    }
    let e2e_ms = ttft_ms + tpot_ms * (output.saturating_sub(1)) as f64;
    if let Some(limit) = slo.e2e_ms.filter(|&l| e2e_ms > l) {
        return fail(
            dominant(&decode),
            format!(
                "one request alone takes {e2e_ms:.0} ms end to end, over the target of {limit} ms"
            ),
        );
    }
    Ok(())
}

/// Which resource binds at the highest rate: the KV pool when requests waited for blocks (or
/// were preempted) just above that rate, else whichever of streaming memory and matmul work
/// took more of the steps' time.
pub(crate) fn binding(
    at_max: &SimOutcome,
    above: &SimOutcome,
    capacity_tokens: usize,
    reasoning: &mut Vec<String>,
) -> Resource {
    let t = &above.time;
    let total = t.weights + t.compute + t.kv_read + t.other;
    let share = |x: f64| if total > 0.0 { 100.0 * x / total } else { 0.0 };
    reasoning.push(format!(
        "10% above that rate: TTFT p99 {:.0} ms, TPOT p99 {:.1} ms; step time is {:.0}% weight \
         streaming, {:.0}% KV reads, {:.0}% matmul work above the weight-streaming floor, \
         {:.0}% sampling and overhead; {} of {} steps left an arrived request waiting for KV \
         blocks, {} for --max-num-seqs, {} preemptions",
        percentile(&above.ttft_ms, 99.0),
        percentile(&above.tpot_ms, 99.0),
        share(t.weights),
        share(t.kv_read),
        share(t.compute),
        share(t.other),
        above.kv_blocked_steps,
        above.steps,
        above.seq_capped_steps,
        above.preemptions
    ));
    let kv_bound = above.kv_blocked_steps * 10 > above.steps
        || above.preemptions > 0
        || at_max.peak_kv_tokens * 10 >= capacity_tokens * 9;
    let seq_capped = above.seq_capped_steps * 2 > above.steps;
    let resource = if kv_bound {
        Resource::KvMemory
    } else if seq_capped {
        // The batch sits at --max-num-seqs because a bigger one breaks the TPOT target: what
        // grows a step with its batch binds (matmul work, or reading each sequence's KV).
        if t.compute >= t.kv_read {
            Resource::Compute
        } else {
            Resource::MemoryBandwidth
        }
    } else if t.weights + t.kv_read >= t.compute {
        Resource::MemoryBandwidth
    } else {
        Resource::Compute
    };
    if seq_capped && !kv_bound {
        reasoning.push(
            "requests queue for a running slot: a larger --max-num-seqs would break the TPOT \
             target, so the step's growth with its batch binds"
                .into(),
        );
    }
    reasoning.push(format!("binding resource: {resource}"));
    resource
}

/// Replicas for `target` requests/s: co-located at `rate` each; disaggregated, prefill-only
/// replicas within the TTFT target and decode-only replicas within the TPOT target.
pub(crate) fn replicas(
    ctx: &Ctx<'_>,
    settings: Settings,
    target: f64,
    rate: f64,
    reasoning: &mut Vec<String>,
) -> Replicas {
    let count = |per: f64| {
        if per > 0.0 {
            (target / per).ceil() as usize
        } else {
            0
        }
    };
    let w = ctx.workload;
    let prefill_w = Workload {
        output_tokens: Length::fixed(1),
        ..*w
    };
    let prefill_slo = Slo {
        tpot_ms: None,
        e2e_ms: None,
        ..*ctx.slo
    };
    let prefill_rps = ctx
        .search(settings, &prefill_w, &prefill_slo, rate)
        .map_or(0.0, |f| f.0);
    let decode_ctx = Ctx {
        prefilled: true,
        cost: ctx.cost.clone(),
        ..*ctx
    };
    let decode_slo = Slo {
        ttft_ms: None,
        e2e_ms: None,
        ..*ctx.slo
    };
    let decode_rps = decode_ctx
        .search(settings, w, &decode_slo, rate)
        .map_or(0.0, |f| f.0);
    let r = Replicas {
        target_rps: target,
        colocated: count(rate),
        prefill: count(prefill_rps),
        decode: count(decode_rps),
        prefill_replica_rps: prefill_rps,
        decode_replica_rps: decode_rps,
    };
    reasoning.push(format!(
        "for {target} req/s: {} co-located replicas at {rate:.3} req/s each; disaggregated, {} \
         prefill replicas ({prefill_rps:.3} req/s each within the TTFT target) and {} decode \
         replicas ({decode_rps:.3} req/s each within the TPOT target); KV transfer time is not \
         modelled",
        r.colocated, r.prefill, r.decode
    ));
    r
}
