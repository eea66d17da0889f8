//! The engine with the real models: a request's greedy tokens do not depend on what else runs
//! (up to 15 other requests of different lengths), on prefix caching, on a KV budget so small that
//! preemption happens again and again, or on the step token budget, with f16 and int8 KV; a
//! seeded sampled request
//! repeats in a batch; and a request sharing a 520-token prefix computes only its suffix.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::collections::HashMap;

use pagoda_core::{EngineCore, EngineRequest, FinishReason, SamplingParams, SchedulerConfig};
use pagoda_model::{EngineSetup, KvCacheDtype, ModelRunner, build_engine};

/// Deterministic pseudo-random prompts (token ids in a plain range of the vocabulary).
fn prompts(count: usize, seed: u64) -> Vec<Vec<u32>> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..count)
        .map(|i| {
            let len = 5 + (i * 37) % 21;
            (0..len)
                .map(|_| {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    1000 + ((x >> 33) % 20000) as u32
                })
                .collect()
        })
        .collect()
}

fn setup(
    max_num_seqs: usize,
    budget_tokens: usize,
    kv_bytes: Option<u64>,
    caching: bool,
) -> EngineSetup {
    EngineSetup {
        scheduler: SchedulerConfig {
            max_num_seqs,
            max_num_batched_tokens: budget_tokens,
            ..Default::default()
        },
        kv_cache_memory: kv_bytes.or(Some(256 << 20)),
        block_size: 16,
        enable_prefix_caching: caching,
        max_model_len: Some(2048),
        ..EngineSetup::default()
    }
}

fn engine(file: &str, s: &EngineSetup) -> EngineCore<ModelRunner> {
    build_engine(common::load_model(file), s).unwrap().0
}

fn req(id: u64, prompt: &[u32], params: SamplingParams) -> EngineRequest {
    EngineRequest {
        id,
        prompt_token_ids: prompt.to_vec(),
        params,
        priority: 0,
        tenant: Default::default(),
        extra_keys: Default::default(),
    }
}

/// Runs every request to its end; returns each one's tokens.
fn run(core: &mut EngineCore<ModelRunner>, reqs: Vec<EngineRequest>) -> HashMap<u64, Vec<u32>> {
    let mut out: HashMap<u64, Vec<u32>> = HashMap::new();
    for r in reqs {
        core.add_request(r).unwrap();
    }
    while core.has_work() {
        for o in core.step() {
            out.entry(o.request_id).or_default().extend(o.new_token_ids);
            if let Some(FinishReason::Error(e)) = o.finish_reason {
                panic!("request {} failed: {e}", o.request_id);
            }
        }
    }
    out
}

fn greedy(n: u32) -> SamplingParams {
    SamplingParams {
        ignore_eos: true,
        ..SamplingParams::greedy(n)
    }
}

fn invariance(file: &str, count: usize, max_tokens: u32, dtype: KvCacheDtype) {
    let ps = prompts(count, 7);
    let setup = |seqs, budget, kv, caching| EngineSetup {
        kv_cache_dtype: dtype,
        ..setup(seqs, budget, kv, caching)
    };
    let reqs = |p: SamplingParams| -> Vec<EngineRequest> {
        ps.iter()
            .enumerate()
            .map(|(i, pr)| req(i as u64, pr, p.clone()))
            .collect()
    };
    // Alone: one sequence at a time.
    let alone = run(
        &mut engine(file, &setup(1, 2048, None, false)),
        reqs(greedy(max_tokens)),
    );
    assert_eq!(alone.len(), count);
    // The reference runs without prefix caching and every case with it; a batched case without
    // it added nothing (these prompts share no block) but a fifth of the test's time.
    let cases = [
        ("batched", setup(64, 2048, None, true)),
        ("token budget 16", setup(64, 16, None, true)),
    ];
    for (name, s) in cases {
        let got = run(&mut engine(file, &s), reqs(greedy(max_tokens)));
        for i in 0..count as u64 {
            assert_eq!(
                got[&i], alone[&i],
                "{file} {name}: request {i} differs from running alone"
            );
        }
    }
    // Blocks of 4 tokens, 4 per sequence, when each needs up to 10: sequences cross a block
    // boundary every 4 tokens and the pool is always short, so preemption never stops.
    let mut s = setup(64, 2048, None, true);
    let bytes_per_block = {
        let mut c = common::load_model(file).config().clone();
        c.kv_cache_dtype = dtype;
        (c.kv_bytes_per_token() * 4) as u64
    };
    let blocks = count * 4;
    s.kv_cache_memory = Some(bytes_per_block * blocks as u64);
    s.block_size = 4;
    s.max_model_len = Some(blocks * 4);
    let mut core = engine(file, &s);
    let got = run(&mut core, reqs(greedy(max_tokens)));
    let preemptions = core.stats().preemptions;
    assert!(
        preemptions >= count as u64 / 4,
        "{file}: only {preemptions} preemptions"
    );
    for i in 0..count as u64 {
        assert_eq!(
            got[&i], alone[&i],
            "{file} with preemption: request {i} differs"
        );
    }
    assert_eq!(core.scheduler().kv().pool().num_free(), blocks);
}

/// 16 requests keep batches wider than the int8 test's 4; 8 tokens each (16 took twice as
/// long: the one-at-a-time reference run is a step per token per request, as do more
/// requests) still cross two 4-token blocks in the preemption run.
#[test]
fn smollm2_greedy_tokens_do_not_depend_on_the_batch() {
    invariance(common::SMOLLM2, 16, 8, KvCacheDtype::F16);
}

#[test]
fn gemma3_greedy_tokens_do_not_depend_on_the_batch() {
    invariance(common::GEMMA3, 8, 16, KvCacheDtype::F16);
}

/// int8 rows are quantized one (token, kv head) at a time, so a row's stored bytes (and so the
/// tokens) do not depend on the batch either. Four requests: the one-at-a-time reference is
/// most of the time, and the f16 test above covers a wider batch.
#[test]
fn smollm2_greedy_tokens_do_not_depend_on_the_batch_with_int8_kv() {
    invariance(common::SMOLLM2, 4, 16, KvCacheDtype::Int8);
}

#[test]
fn seeded_sampling_repeats_alone_and_in_a_batch() {
    let ps = prompts(16, 3);
    let sampled = SamplingParams {
        temperature: 0.9,
        top_p: 0.95,
        seed: Some(1234),
        ignore_eos: true,
        max_tokens: 16,
        ..SamplingParams::default()
    };
    let alone = run(
        &mut engine(common::SMOLLM2, &setup(64, 2048, None, true)),
        vec![req(0, &ps[0], sampled.clone())],
    );
    let mut batch = vec![req(0, &ps[0], sampled.clone())];
    for (i, p) in ps.iter().enumerate().skip(1) {
        // Others sample too, with their own seeds, so a shared stream would show.
        let mut other = sampled.clone();
        other.seed = Some(i as u64);
        batch.push(req(i as u64, p, other));
    }
    let together = run(
        &mut engine(common::SMOLLM2, &setup(64, 2048, None, true)),
        batch,
    );
    assert_eq!(together[&0], alone[&0]);
    assert_eq!(alone[&0].len(), 16);
}

#[test]
fn a_shared_520_token_prefix_is_computed_once() {
    // 520, not 1,000: 32 blocks and a partial one show the rule at half the prefill cost.
    let prefix: Vec<u32> = prompts(1, 11)[0]
        .iter()
        .cycle()
        .take(520)
        .copied()
        .collect();
    let mut a = prefix.clone();
    a.extend([2000, 2001, 2002]);
    let mut b = prefix.clone();
    b.extend([3000, 3001, 3002, 3003, 3004]);
    let mut core = engine(common::SMOLLM2, &setup(64, 2048, None, true));
    run(&mut core, vec![req(1, &a, greedy(2))]);
    let before = core.stats().prompt_tokens;
    let mut cached = 0;
    core.add_request(req(2, &b, greedy(2))).unwrap();
    let mut toks = Vec::new();
    while core.has_work() {
        for o in core.step() {
            cached = o.num_cached_tokens;
            toks.extend(o.new_token_ids);
        }
    }
    let computed = core.stats().prompt_tokens - before;
    // 520 shared tokens = 32 full blocks of 16 (512 tokens); the rest is computed.
    assert_eq!(cached, 512);
    assert_eq!(computed, (b.len() - 512) as u64);
    // And the tokens are the ones a cold run gives.
    let cold = run(
        &mut engine(common::SMOLLM2, &setup(64, 2048, None, false)),
        vec![req(2, &b, greedy(2))],
    );
    assert_eq!(toks, cold[&2]);
}
