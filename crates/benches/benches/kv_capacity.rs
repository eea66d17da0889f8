//! KV memory with and without sliding-window freeing (Gemma 3). Not criterion: it prints.
//!
//! `cargo bench -p pagoda-benches --bench kv_capacity -- capacity [CONTEXT] [BUDGET_MIB]`: sizes
//! the pool as `pagoda serve` does, then admits CONTEXT-token sequences (default 8192, 2048
//! MiB) through the real block accounting (`KvCacheManager`, in prefill chunks of 2048 with
//! the window's blocks given back after each) until the pool is full, and prints how many
//! were held with freeing on and off. No forward pass runs: capacity is bookkeeping.
//!
//! `... -- decode [STREAMS] [CONTEXT] [GENERATE]` (default 16, 2048, 32): prefills STREAMS
//! prompts of CONTEXT tokens, then times the decode steps alone, freeing on and off in turn
//! (on, off, on, off), and prints decode tokens/s of each run.
//!
//! `PAGODA_KV=int8` runs either with int8 KV instead of f16.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::time::Instant;

use pagoda_core::kv::{ComputedBlocks, ExtraKeys, KvCacheManager};
use pagoda_core::{EngineRequest, Request, SamplingParams, SchedulerConfig};
use pagoda_model::{EngineSetup, KvCacheDtype, Model, build_engine};

const GEMMA3: &str = "gemma-3-270m-q4_k_m.gguf";

fn model() -> Model {
    let dir = std::env::var_os("PAGODA_MODEL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/pagoda/models")
        });
    Model::open(&dir.join(GEMMA3)).unwrap()
}

/// `PAGODA_KV=int8` (or f32): the KV element type of every engine here [default: f16].
fn kv_dtype() -> KvCacheDtype {
    std::env::var("PAGODA_KV")
        .ok()
        .map(|v| v.parse().unwrap())
        .unwrap_or_default()
}

fn setup(freeing: bool, budget: u64, max_model_len: usize, seqs: usize) -> EngineSetup {
    EngineSetup {
        scheduler: SchedulerConfig {
            max_num_seqs: seqs,
            ..Default::default()
        },
        kv_cache_memory: Some(budget),
        max_model_len: Some(max_model_len),
        sliding_window_freeing: freeing,
        kv_cache_dtype: kv_dtype(),
        ..EngineSetup::default()
    }
}

fn prompt(id: u64, n: usize) -> Vec<u32> {
    let mut x = (id + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            1000 + (x % 20000) as u32
        })
        .collect()
}

/// Sequences of `context` tokens the pool of `freeing` holds at once.
fn capacity(freeing: bool, context: usize, budget: u64) -> (usize, usize) {
    let (core, report) = build_engine(model(), &setup(freeing, budget, context, 1)).unwrap();
    let groups = core.scheduler().kv().groups().to_vec();
    drop(core);
    let bs = report.block_size;
    let mut kv = KvCacheManager::with_groups(report.num_blocks, bs, false, groups);
    let mut held = 0;
    'seqs: loop {
        let mut req = Request::new(
            held as u64,
            prompt(held as u64, context),
            SamplingParams::default(),
            0,
            0,
            held as u64,
            ExtraKeys::default().chain(pagoda_core::kv::block_hash::root_hash("0")),
            bs,
        );
        while req.num_computed_tokens < context {
            let n = (context - req.num_computed_tokens).min(2048);
            if kv
                .allocate_slots(&req, n, &ComputedBlocks::default())
                .is_none()
            {
                break 'seqs;
            }
            req.num_computed_tokens += n;
            kv.cache_full_blocks(&req);
        }
        held += 1;
    }
    (held, report.num_blocks)
}

/// Decode tokens/s of `streams` sequences after a `context`-token prefill each.
fn decode(freeing: bool, streams: usize, context: usize, generate: u32) -> f64 {
    let s = setup(freeing, 2 << 30, context + generate as usize + 16, streams);
    let (mut core, _) = build_engine(model(), &s).unwrap();
    for id in 0..streams as u64 {
        core.add_request(EngineRequest {
            id,
            prompt_token_ids: prompt(id, context),
            params: SamplingParams {
                max_tokens: generate,
                ignore_eos: true,
                temperature: 0.0,
                ..Default::default()
            },
            priority: 0,
            tenant: Default::default(),
            extra_keys: Default::default(),
        })
        .unwrap();
    }
    // Prefill: until every prompt token is computed.
    while core.stats().prompt_tokens < (streams * context) as u64 {
        core.step();
    }
    let t = Instant::now();
    let mut tokens = 0usize;
    while core.has_work() {
        tokens += core
            .step()
            .iter()
            .map(|o| o.new_token_ids.len())
            .sum::<usize>();
    }
    tokens as f64 / t.elapsed().as_secs_f64()
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let num = |i: usize, d: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    match args.first().map(String::as_str) {
        Some("decode") => {
            let (streams, context, generate) = (num(1, 16), num(2, 2048), num(3, 32) as u32);
            for round in 0..2 {
                for freeing in [true, false] {
                    let tps = decode(freeing, streams, context, generate);
                    println!(
                        "round {round} freeing {freeing} kv {:?}: {streams} streams x {context} context: decode {tps:.1} tok/s",
                        kv_dtype()
                    );
                }
            }
        }
        _ => {
            let (context, budget_mib) = (num(1, 8192), num(2, 2048));
            let budget = (budget_mib as u64) << 20;
            let (on, blocks_on) = capacity(true, context, budget);
            let (off, blocks_off) = capacity(false, context, budget);
            println!(
                "{:?} KV, {context}-token sequences in {budget_mib} MiB: {on} with freeing ({blocks_on} blocks), {off} without ({blocks_off} blocks): {:.2}x",
                kv_dtype(),
                on as f64 / off.max(1) as f64
            );
        }
    }
}
