//! Tenant-fair scheduling against the fake executor, time counted in engine steps: a tenant
//! flooding the queue must not push a trickling tenant's time to first token past 1.5x of its
//! value with the flood absent (FCFS fails the same check), and weights split the tokens.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::collections::HashMap;

use common::*;
use pagoda_core::{EngineCore, SchedulerConfig, SchedulingPolicy, Tenant};

const FLOOD: Tenant = Tenant { id: 1, weight: 1 };
const TRICKLE: Tenant = Tenant { id: 2, weight: 1 };
const PROMPT: u32 = 24;
const MAX_TOKENS: u32 = 8;

fn core(policy: SchedulingPolicy) -> EngineCore<FakeExecutor> {
    let config = SchedulerConfig {
        max_num_batched_tokens: 64,
        max_num_seqs: 64,
        long_prefill_token_threshold: 0,
        max_waiting_requests: 4096,
        max_model_len: 1024,
        policy,
        ..SchedulerConfig::default()
    };
    engine(1024, 16, config, false)
}

fn submit(core: &mut EngineCore<FakeExecutor>, id: u64, tenant: Tenant) {
    let prompt = (0..PROMPT).map(|i| (id as u32 * 7 + i) % 900).collect();
    let mut r = request(id, prompt, MAX_TOKENS);
    r.tenant = tenant;
    core.add_request(r).unwrap();
}

/// Steps from submission to first token of each trickle request: one every 10 steps, 40 of
/// them, while (when `flood`) the other tenant keeps 150 requests outstanding for 400 steps.
fn trickle_ttft(policy: SchedulingPolicy, flood: bool) -> Vec<u64> {
    let mut core = core(policy);
    let mut next_id = 0;
    let mut flood_outstanding = 0;
    let mut submitted: HashMap<u64, u64> = HashMap::new();
    let mut trickle_ids = std::collections::HashSet::new();
    let mut ttft = Vec::new();
    for step in 0..2000u64 {
        if ttft.len() == 40 {
            break;
        }
        if flood && step < 400 {
            while flood_outstanding < 150 {
                submit(&mut core, next_id, FLOOD);
                next_id += 1;
                flood_outstanding += 1;
            }
        }
        if step % 10 == 0 && ttft.len() + submitted.len() < 40 {
            submit(&mut core, next_id, TRICKLE);
            submitted.insert(next_id, step);
            next_id += 1;
        }
        for o in core.step() {
            if let Some(at) = submitted.remove(&o.request_id) {
                ttft.push(step + 1 - at); // the first output carries the first token
            } else if o.finish_reason.is_some() && !is_trickle(&o.request_id, &trickle_ids) {
                flood_outstanding -= 1;
            }
        }
        trickle_ids.extend(submitted.keys().copied());
    }
    assert_eq!(ttft.len(), 40, "every trickle request got its first token");
    ttft
}

fn is_trickle(id: &u64, ids: &std::collections::HashSet<u64>) -> bool {
    ids.contains(id)
}

fn p99(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v[(v.len() * 99).div_ceil(100) - 1]
}

#[test]
fn a_flood_does_not_delay_a_trickle_under_fair() {
    let alone = p99(trickle_ttft(SchedulingPolicy::Fair, false));
    let fair = p99(trickle_ttft(SchedulingPolicy::Fair, true));
    let fcfs = p99(trickle_ttft(SchedulingPolicy::Fcfs, true));
    assert_eq!(
        alone, 1,
        "alone, a request gets its first token in its first step"
    );
    assert!(
        fair as f64 <= 1.5 * alone as f64,
        "fair: trickle TTFT p99 {fair} steps vs {alone} alone"
    );
    // The same load under FCFS buries the trickle behind the flood's backlog.
    assert!(fcfs > 10 * alone, "fcfs: trickle TTFT p99 {fcfs} steps");
}

#[test]
fn weights_split_the_tokens_while_both_wait() {
    let mut core = core(SchedulingPolicy::Fair);
    let light = Tenant { id: 1, weight: 1 };
    let heavy = Tenant { id: 2, weight: 3 };
    for id in 0..400u64 {
        let t = if id % 2 == 0 { light } else { heavy };
        submit(&mut core, id, t);
    }
    let mut tokens: HashMap<u32, usize> = HashMap::new();
    let mut seq_tenant = HashMap::new();
    for _ in 0..100 {
        core.step();
        let step = core.executor().steps.last().unwrap();
        for s in &step.scheduled {
            if s.new.is_some() {
                let t = core.scheduler().request(s.seq_id).map(|r| r.tenant.id);
                seq_tenant.insert(s.seq_id, t.unwrap());
            }
            *tokens.entry(seq_tenant[&s.seq_id]).or_default() += s.num_scheduled_tokens;
        }
    }
    let (l, h) = (tokens[&1] as f64, tokens[&2] as f64);
    assert!(
        (2.6..=3.4).contains(&(h / l)),
        "weight 3 vs 1 got {h} vs {l} tokens"
    );
}
