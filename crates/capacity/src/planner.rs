//! `pagoda plan`'s answer: for a cost profile, a workload and SLOs, the highest arrival rate
//! one replica serves within the SLO (found by simulating the scheduler at each probed rate),
//! under the default settings and under each candidate `--max-num-seqs` /
//! `--max-num-batched-tokens`, which resource binds at that rate, the KV memory it needs, the
//! replicas for a target rate with and without prefill/decode disaggregation, and the
//! reasoning behind each figure.

use crate::plan_search::Ctx;
use crate::plan_types::SLOWER_STEPS;
pub use crate::plan_types::{
    Candidate, DEFAULTS, Plan, PlanError, PlanOptions, Replicas, Resource, Settings,
};
use crate::profile::CostProfile;
use crate::simulate::percentile;
use crate::slo::Slo;
use crate::step_cost::StepCost;
use crate::workload::Workload;

/// Plan for `workload` under `slo` on the machine and model of `profile`. When the KV pool
/// binds under f16, int8 KV (about 1.9x the tokens in the same memory) is planned too and
/// recommended if it serves at least 5% more; its step costs are taken as f16's (not timed).
pub fn plan(
    profile: &CostProfile,
    workload: &Workload,
    slo: &Slo,
    opts: &PlanOptions,
) -> Result<Plan, PlanError> {
    let mut first = plan_one(profile, workload, slo, opts);
    if opts.kv_cache_dtype != "f16" {
        return first;
    }
    let kv_bound = match &first {
        Ok(p) => p.binding_resource == Resource::KvMemory,
        Err(PlanError::Unattainable { resource, .. }) => *resource == Resource::KvMemory,
        Err(_) => false,
    };
    if kv_bound {
        let int8 = PlanOptions {
            kv_cache_dtype: "int8",
            ..*opts
        };
        if let Ok(mut q) = plan_one(profile, workload, slo, &int8) {
            let better = first
                .as_ref()
                .map_or(true, |p| q.max_rate_rps > p.max_rate_rps * 1.05);
            if better {
                q.reasoning.push(
                    "the KV pool binds with f16: int8 KV holds about 1.9x the tokens, so \
                     --kv-cache-dtype int8 (step costs assumed equal to f16's)"
                        .into(),
                );
                return Ok(q);
            }
        }
        if let Ok(p) = &mut first {
            p.reasoning.push(
                "int8 KV was planned too and serves no more (another resource binds next)".into(),
            );
        }
    }
    first
}

fn plan_one(
    profile: &CostProfile,
    workload: &Workload,
    slo: &Slo,
    opts: &PlanOptions,
) -> Result<Plan, PlanError> {
    if slo.ttft_ms.is_none() && slo.e2e_ms.is_none() {
        return Err(PlanError::NoLatencyBound);
    }
    let bytes_per_token = profile
        .kv_bytes_per_token
        .of(opts.kv_cache_dtype)
        .unwrap_or(profile.kv_bytes_per_token.f16)
        .max(1);
    let budget = opts.kv_budget_bytes.unwrap_or(profile.kv_budget_bytes);
    let block_size = profile.block_size.max(1);
    let ctx = Ctx {
        cost: StepCost::fit(profile),
        workload,
        slo,
        opts,
        num_blocks: (budget / (bytes_per_token * block_size as u64)) as usize,
        block_size,
        prefilled: false,
    };
    let mut reasoning = Vec::new();
    if !profile.served_decode.is_empty() {
        reasoning.push(format!(
            "steps priced as served: the profile's served decode steps ran {:.2}x its bare forwards",
            ctx.cost.served_factor()
        ));
    }
    crate::plan_checks::check_attainable(
        &ctx.cost,
        workload,
        slo,
        ctx.num_blocks * block_size,
        &mut reasoning,
    )?;
    // A first guess for the ladder: one decode-bound batch of 8.
    let mean_out = workload.output_tokens.mean().max(1.0);
    let start =
        8.0 / (mean_out * ctx.cost.decode_secs(8, workload.prompt_tokens.hi as usize)).max(1e-6);
    let mut candidates = Vec::new();
    for &seqs in &[4usize, 8, 16, 32, 64, 128] {
        for &tokens in &[256usize, 512, 1024, 2048] {
            let settings = Settings {
                max_num_seqs: seqs,
                max_num_batched_tokens: tokens,
                long_prefill_token_threshold: DEFAULTS.long_prefill_token_threshold.min(tokens),
            };
            let found = ctx.search(settings, workload, slo, start);
            candidates.push(Candidate {
                settings,
                max_rate_rps: found.as_ref().map_or(0.0, |f| f.0),
                goodput_rps: found.as_ref().map_or(0.0, |f| f.1.goodput()),
            });
        }
    }
    let defaults = candidates
        .iter()
        .find(|c| c.settings == DEFAULTS)
        .copied()
        .unwrap_or(Candidate {
            settings: DEFAULTS,
            max_rate_rps: 0.0,
            goodput_rps: 0.0,
        });
    // The defaults win ties: a recommendation must be better, not merely different.
    let mut recommended = defaults;
    for c in &candidates {
        if c.max_rate_rps > recommended.max_rate_rps * 1.02 {
            recommended = *c;
        }
    }
    let Some((rate, at_max)) = ctx.search(recommended.settings, workload, slo, start) else {
        return Err(PlanError::Unattainable {
            resource: Resource::Compute,
            reason: "no simulated rate met the SLO with any setting tried".into(),
        });
    };
    if rate >= start * 512.0 {
        reasoning.push(format!(
            "even {} requests arriving at once meet the SLO: the run is too short to load a \
             replica, so the rate is unbounded here; raise --num-requests",
            opts.num_requests
        ));
    }
    // The same settings with every step SLOWER_STEPS times as long: the margin to plan with.
    let slower = Ctx {
        cost: ctx.cost.scaled(SLOWER_STEPS),
        ..ctx
    };
    let rate_slower_steps = slower
        .search(recommended.settings, workload, slo, start)
        .map_or(0.0, |(r, _)| r);
    let above = ctx.run(recommended.settings, workload, slo, rate * 1.1);
    let binding =
        crate::plan_checks::binding(&at_max, &above, ctx.num_blocks * block_size, &mut reasoning);
    let kv_bytes_needed = at_max.peak_kv_tokens as u64 * bytes_per_token;
    let kv_at_cap = (recommended.settings.max_num_seqs as u64 * workload.max_own_tokens()
        + u64::from(workload.shared_prefix_tokens))
        * bytes_per_token;
    reasoning.push(format!(
        "at {rate:.3} req/s with --max-num-seqs {} --max-num-batched-tokens {}: {} of {} simulated \
         requests meet the SLO, TTFT p99 {:.0} ms, TPOT p99 {:.1} ms, at most {} running, \
         peak KV {} tokens = {:.1} MiB of {:.1} MiB",
        recommended.settings.max_num_seqs,
        recommended.settings.max_num_batched_tokens,
        at_max.good,
        at_max.requests,
        percentile(&at_max.ttft_ms, 99.0),
        percentile(&at_max.tpot_ms, 99.0),
        at_max.peak_running,
        at_max.peak_kv_tokens,
        kv_bytes_needed as f64 / 1048576.0,
        budget as f64 / 1048576.0,
    ));
    reasoning.push(format!(
        "with every step {:.0}% slower than profiled (this machine's step costs drifted that \
         much between windows): {rate_slower_steps:.3} req/s, {:.0}% less; plan with a margin",
        (SLOWER_STEPS - 1.0) * 100.0,
        (1.0 - rate_slower_steps / rate.max(1e-12)) * 100.0,
    ));
    reasoning.push(format!(
        "defaults (--max-num-seqs {} --max-num-batched-tokens {}) reach {:.3} req/s",
        DEFAULTS.max_num_seqs, DEFAULTS.max_num_batched_tokens, defaults.max_rate_rps
    ));
    reasoning.push(
        "speculative decoding is not planned: its gain depends on how often your traffic's \
         drafts are accepted; measure it with `pagoda bench` against --speculative-config"
            .into(),
    );
    let replicas = opts.target_rps.map(|target| {
        crate::plan_checks::replicas(&ctx, recommended.settings, target, rate, &mut reasoning)
    });
    let s = recommended.settings;
    let mut recommended_flags: Vec<String> = [
        ("--max-num-seqs", s.max_num_seqs.to_string()),
        (
            "--max-num-batched-tokens",
            s.max_num_batched_tokens.to_string(),
        ),
        (
            "--long-prefill-token-threshold",
            s.long_prefill_token_threshold.to_string(),
        ),
        ("--kv-cache-dtype", opts.kv_cache_dtype.to_string()),
    ]
    .into_iter()
    .flat_map(|(k, v)| [k.to_string(), v])
    .collect();
    if let Some(b) = opts.kv_budget_bytes {
        recommended_flags.extend([
            "--kv-cache-memory".to_string(),
            format!("{}MiB", b.div_ceil(1 << 20)),
        ]);
    }
    Ok(Plan {
        max_goodput_rps: at_max.goodput(),
        max_rate_rps: rate,
        max_rate_rps_slower_steps: rate_slower_steps,
        binding_resource: binding,
        kv_bytes_needed,
        kv_bytes_at_max_num_seqs: kv_at_cap,
        kv_bytes_available: budget,
        recommended_flags,
        recommended: Candidate {
            max_rate_rps: rate,
            goodput_rps: at_max.goodput(),
            ..recommended
        },
        defaults,
        candidates,
        ttft_p99_ms: percentile(&at_max.ttft_ms, 99.0),
        tpot_p99_ms: percentile(&at_max.tpot_ms, 99.0),
        replicas,
        reasoning,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::simulate::tests::synthetic;
    use crate::workload::Length;

    fn workload(prompt: u32, output: u32) -> Workload {
        Workload {
            prompt_tokens: Length::fixed(prompt),
            output_tokens: Length::fixed(output),
            shared_prefix_tokens: 0,
            shared_prefix_cached: false,
            burstiness: 1.0,
        }
    }

    #[test]
    fn a_kv_bound_replica_serves_what_its_pool_holds() {
        // Steps cost 10 ms whatever their size, so only the pool limits concurrency: 16
        // blocks of 16 tokens hold 8 requests of 16 + 11 tokens (2 blocks each), which finish
        // 11 steps after they start: at most 8 / 0.110 s = 72.7 requests/s.
        let profile = synthetic(0.010, 4096, 0.0);
        let opts = PlanOptions {
            kv_budget_bytes: Some(16 * 16 * 1024),
            num_requests: 1000,
            ..PlanOptions::default()
        };
        let slo = Slo::parse("ttft=300ms,tpot=20ms").unwrap();
        let p = plan_one(&profile, &workload(16, 11), &slo, &opts).unwrap();
        let bound = 8.0 / 0.110;
        // A finite run may overload briefly: its last 10% may miss the SLO.
        assert!(
            p.max_rate_rps <= 1.1 * bound && p.max_rate_rps > 0.75 * bound,
            "{}",
            p.max_rate_rps
        );
        assert_eq!(p.binding_resource, Resource::KvMemory);
        assert!(p.kv_bytes_needed <= 16 * 16 * 1024);
        assert!(p.recommended.max_rate_rps >= p.defaults.max_rate_rps);
        let flags = p.recommended_flags.join(" ");
        assert!(
            flags.contains("--max-num-seqs") && flags.contains("--kv-cache-dtype f16"),
            "{flags}"
        );
        // int8 KV holds 30 blocks of 16 tokens (544 bytes a token): 15 requests, about twice
        // the rate; `plan` tries it because the pool binds.
        let q = plan(&profile, &workload(16, 11), &slo, &opts).unwrap();
        assert!(
            q.max_rate_rps > 1.6 * p.max_rate_rps,
            "{} vs {}",
            q.max_rate_rps,
            p.max_rate_rps
        );
        assert!(
            q.recommended_flags
                .join(" ")
                .contains("--kv-cache-dtype int8")
        );
    }

    #[test]
    fn a_compute_bound_replica_is_limited_by_its_tpot() {
        // 10 ms + 1 ms per token over 1: a TPOT target of 18 ms allows 9 tokens a step, so a
        // replica decodes at most 9 requests together, each for 21 steps of about 18 ms:
        // 9 / (21 · 18 ms) = 23.8 requests/s.
        let profile = synthetic(0.010, 1, 0.001);
        let slo = Slo::parse("ttft=500ms,tpot=18ms").unwrap();
        let opts = PlanOptions {
            num_requests: 1000,
            ..PlanOptions::default()
        };
        let p = plan(&profile, &workload(1, 21), &slo, &opts).unwrap();
        assert!(
            p.max_rate_rps < 24.5 && p.max_rate_rps > 15.0,
            "{}",
            p.max_rate_rps
        );
        assert_eq!(p.binding_resource, Resource::Compute, "{:?}", p.reasoning);
        // Steps 10% slower: 11 ms + 1.1 ms a token allow 7 tokens within 18 ms, each request
        // 21 steps of about 17.6 ms: 7 / (21 · 17.6 ms) = 18.9 requests/s, 20% less for a 10%
        // slower step (the TPOT cliff amplifies).
        assert!(
            p.max_rate_rps_slower_steps > 12.0
                && p.max_rate_rps_slower_steps < 19.5
                && p.max_rate_rps_slower_steps < p.max_rate_rps * 0.9,
            "{} vs {}",
            p.max_rate_rps_slower_steps,
            p.max_rate_rps
        );
        let opts = PlanOptions {
            target_rps: Some(100.0),
            ..opts
        };
        let p = plan(&profile, &workload(1, 21), &slo, &opts).unwrap();
        let r = p.replicas.unwrap();
        assert_eq!(r.colocated, (100.0 / p.max_rate_rps).ceil() as usize);
        assert!(r.decode >= 1 && r.prefill >= 1);
    }

    #[test]
    fn an_unattainable_slo_names_the_binding_resource() {
        let flat = synthetic(0.010, 64, 0.0);
        let err = |profile: &CostProfile, w: Workload, slo: &str, opts: PlanOptions| match plan(
            profile,
            &w,
            &Slo::parse(slo).unwrap(),
            &opts,
        ) {
            Err(PlanError::Unattainable { resource, reason }) => (resource, reason),
            Err(e) => panic!("{e}"),
            Ok(p) => panic!("planned {} req/s", p.max_rate_rps),
        };
        // Every step streams the weights for 10 ms: no batch decodes faster.
        let (r, why) = err(
            &flat,
            workload(16, 8),
            "ttft=10s,tpot=5ms",
            PlanOptions::default(),
        );
        assert_eq!(r, Resource::MemoryBandwidth);
        assert!(why.contains("TPOT target of 5 ms"), "{why}");
        // A 4096-token prompt costs 4 s of matmul work.
        let steep = synthetic(0.010, 64, 0.001);
        let (r, why) = err(&steep, workload(4096, 8), "ttft=1s", PlanOptions::default());
        assert_eq!(r, Resource::Compute);
        assert!(why.contains("TTFT target of 1000 ms"), "{why}");
        // A pool of 1 MiB holds 1024 tokens: a 2000-token request never fits.
        let opts = PlanOptions {
            kv_budget_bytes: Some(1 << 20),
            ..PlanOptions::default()
        };
        let (r, why) = err(&flat, workload(2000, 8), "ttft=10s", opts);
        assert_eq!(r, Resource::KvMemory);
        assert!(why.contains("pool holds 1024"), "{why}");
        assert_eq!(
            plan(
                &flat,
                &workload(16, 8),
                &Slo::parse("tpot=50ms").unwrap(),
                &PlanOptions::default()
            ),
            Err(PlanError::NoLatencyBound)
        );
    }
}
