//! Engine-level figures of the engine-core issue, printed as a table (not criterion: each figure
//! is one long run). `cargo bench -p pagoda-benches --bench engine [-- MODEL_FILE]`
//!
//! 1. 64 requests of 128 prompt tokens and 128 generated (ignore_eos) as one continuous batch,
//!    against the same requests one after another (max_num_seqs = 1): aggregate tokens/s.
//! 2. Time to first token of a request whose 1,000-token prefix is cached, against prefix
//!    caching off.
//! 3. KV slots wasted to partial blocks, at the step of the batch run with the most KV allocated.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use pagoda_core::{EngineCore, EngineRequest, SamplingParams, SchedulerConfig};
use pagoda_model::{EngineSetup, Model, ModelRunner, build_engine};

fn model(file: &str) -> Model {
    let dir = std::env::var_os("PAGODA_MODEL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/pagoda/models")
        });
    Model::open(&dir.join(file)).unwrap()
}

fn engine(file: &str, max_num_seqs: usize, caching: bool) -> EngineCore<ModelRunner> {
    let setup = EngineSetup {
        scheduler: SchedulerConfig {
            max_num_seqs,
            ..Default::default()
        },
        kv_cache_memory: Some(1 << 30),
        enable_prefix_caching: caching,
        ..EngineSetup::default()
    };
    build_engine(model(file), &setup).unwrap().0
}

fn prompt(len: usize, seed: u64) -> Vec<u32> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            1000 + (x % 20000) as u32
        })
        .collect()
}

fn request(id: u64, prompt: Vec<u32>, max_tokens: u32) -> EngineRequest {
    EngineRequest {
        id,
        prompt_token_ids: prompt,
        params: SamplingParams {
            ignore_eos: true,
            ..SamplingParams::greedy(max_tokens)
        },
        priority: 0,
        tenant: Default::default(),
        extra_keys: Default::default(),
    }
}

/// Runs to idle; returns (wall time, generated tokens, time to first token per request id).
fn drain(core: &mut EngineCore<ModelRunner>) -> (Duration, usize, Vec<(u64, Duration)>) {
    let t0 = Instant::now();
    let mut generated = 0;
    let mut ttft = Vec::new();
    while core.has_work() {
        for o in core.step() {
            if !ttft.iter().any(|(id, _)| *id == o.request_id) {
                ttft.push((o.request_id, o.timing.at - o.timing.arrival));
            }
            generated += o.new_token_ids.len();
        }
    }
    (t0.elapsed(), generated, ttft)
}

fn main() {
    let file = std::env::args()
        .skip(1)
        .find(|a| a.ends_with(".gguf"))
        .unwrap_or_else(|| "SmolLM2-135M-Instruct.Q4_1.gguf".into());
    println!(
        "model {file}, {} threads",
        pagoda_kernels::parallel::num_threads()
    );

    // 1. Batch against one after another (KV waste: at the last step with the most allocated).
    let reqs: Vec<EngineRequest> = (0..64)
        .map(|i| request(i, prompt(128, i + 1), 128))
        .collect();
    let mut batched = engine(&file, 64, true);
    for r in reqs.clone() {
        batched.add_request(r).unwrap();
    }
    let (wall_b, gen_b, _) = drain(&mut batched);
    let stats = batched.stats();
    let mut serial = engine(&file, 1, true);
    for r in reqs {
        serial.add_request(r).unwrap();
    }
    let (wall_s, gen_s, _) = drain(&mut serial);
    let (tb, ts) = (
        gen_b as f64 / wall_b.as_secs_f64(),
        gen_s as f64 / wall_s.as_secs_f64(),
    );
    println!("64 x (128 in, 128 out), generated tok/s:");
    println!(
        "  continuous batch   {tb:8.1}  ({gen_b} tokens in {:.1} s)",
        wall_b.as_secs_f64()
    );
    println!(
        "  one after another  {ts:8.1}  ({gen_s} tokens in {:.1} s)",
        wall_s.as_secs_f64()
    );
    println!("  ratio              {:8.2}x", tb / ts);
    let waste = 1.0 - stats.peak_kv_filled as f64 / stats.peak_kv_slots.max(1) as f64;
    println!(
        "KV at peak: {} slots allocated, {} filled: {:.2}% wasted to partial blocks",
        stats.peak_kv_slots,
        stats.peak_kv_filled,
        waste * 100.0
    );

    // 2. TTFT with a cached 1,000-token prefix.
    let prefix = prompt(1000, 999);
    let with_suffix = |s: u64| {
        let mut p = prefix.clone();
        p.extend(prompt(24, s));
        p
    };
    for caching in [true, false] {
        let mut core = engine(&file, 64, caching);
        core.add_request(request(1, with_suffix(1), 1)).unwrap();
        drain(&mut core);
        core.add_request(request(2, with_suffix(2), 1)).unwrap();
        let (_, _, ttft) = drain(&mut core);
        println!(
            "TTFT, 1,000-token shared prefix + 24 new tokens, prefix caching {}: {:.1} ms",
            if caching { "on " } else { "off" },
            ttft[0].1.as_secs_f64() * 1e3
        );
    }
}
