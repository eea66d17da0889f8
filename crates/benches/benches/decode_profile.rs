//! Steady decode through the whole engine (scheduler, runner, forward, sampler) at a fixed batch,
//! for profiling the CPU time of a decode step. Not criterion: it prints decode steps/s and
//! tokens/s, and when `PAGODA_PERF_CTL` names a `perf record --control fifo:` it enables the
//! recording only after every prompt has been prefilled, so the profile holds decode steps alone.
//!
//! `cargo bench -p pagoda-benches --bench decode_profile -- [BATCH] [MODEL_FILE]` (default 1,
//! SmolLM2). Prompts are 96 tokens (`PAGODA_PROMPT_LEN`) and 64 are generated: the context runs
//! 96..160, ~128 on average. `PAGODA_KV_CACHE_DTYPE` (f16, f32 or int8) picks the KV type.
//!
//! Unless profiling, it also sets the weight bytes a step streams (every tensor once; a tied
//! embedding once, as the LM head) against the machine's plain read bandwidth, read right after
//! each step (`pagoda_kernels::bandwidth`), and prints the median of those per-step shares: at
//! batch 1 that is the share of the bound on tokens per second. On a shared host the bandwidth
//! drifts by a third within a minute, and a reading next to each step follows it. The KV
//! cache's reads (~3% of the weights at this context) are left out, so the share is a floor.
//! It prints the process's CPU time per decode step as well, which a loaded machine does not
//! inflate (the compute-bound steps of a large batch are read against the int8 roof with it).
#![allow(clippy::unwrap_used)]

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use pagoda_core::{EngineRequest, SamplingParams, SchedulerConfig};
use pagoda_kernels::bandwidth::ReadProbe;
use pagoda_model::{EngineSetup, Model, build_engine};

const GENERATE: u32 = 64;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let batch: usize = args.iter().find_map(|a| a.parse().ok()).unwrap_or(1).max(1);
    let file = args
        .iter()
        .find(|a| a.ends_with(".gguf"))
        .cloned()
        .unwrap_or_else(|| "SmolLM2-135M-Instruct.Q4_1.gguf".into());
    let threads = std::env::var("PAGODA_THREADS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(2);
    pagoda_kernels::parallel::set_num_threads(threads);
    let prompt_len: usize = std::env::var("PAGODA_PROMPT_LEN")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(96);
    let kv_cache_dtype = std::env::var("PAGODA_KV_CACHE_DTYPE")
        .map_or(Ok(Default::default()), |d| d.parse())
        .unwrap();
    let dir = std::env::var_os("PAGODA_MODEL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/pagoda/models")
        });
    let t_load = Instant::now();
    let model = Model::open(&dir.join(&file)).unwrap();
    let gguf = model.gguf();
    let tied = gguf.tensor("output.weight").is_none();
    let weight_bytes: usize = gguf
        .tensors()
        .iter()
        .filter(|t| tied || t.name != "token_embd.weight")
        .map(|t| gguf.tensor_data(t).len())
        .sum();
    let setup = EngineSetup {
        scheduler: SchedulerConfig {
            max_num_seqs: batch,
            ..Default::default()
        },
        kv_cache_memory: Some(1 << 30),
        kv_cache_dtype,
        ..EngineSetup::default()
    };
    let mut core = build_engine(model, &setup).unwrap().0;
    let load = t_load.elapsed();

    for id in 0..batch as u64 {
        let mut x = (id + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let prompt = (0..prompt_len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                1000 + (x % 20000) as u32
            })
            .collect();
        core.add_request(EngineRequest {
            id,
            prompt_token_ids: prompt,
            params: SamplingParams {
                ignore_eos: true,
                ..SamplingParams::greedy(GENERATE)
            },
            priority: 0,
            tenant: Default::default(),
            extra_keys: Default::default(),
        })
        .unwrap();
    }
    // Prefill: until every request has its first token.
    let mut started = vec![false; batch];
    while started.iter().any(|s| !s) {
        for o in core.step() {
            started[o.request_id as usize] = true;
        }
    }
    let ctl = std::env::var_os("PAGODA_PERF_CTL")
        .map(|p| std::fs::OpenOptions::new().write(true).open(p).unwrap());
    // The probe's reads would fill a profile, so a profiled run takes none.
    let probe = match ctl {
        Some(_) => None,
        None => Some(ReadProbe::new(weight_bytes, threads).unwrap()),
    };
    if let Some(mut f) = ctl.as_ref() {
        f.write_all(b"enable\n").unwrap();
    }
    let (mut steps, mut tokens, mut wall, mut cpu) = (0usize, 0usize, 0.0f64, 0.0f64);
    let mut shares = Vec::new();
    while core.has_work() {
        let (t0, c0) = (Instant::now(), process_cpu_secs());
        tokens += core
            .step()
            .iter()
            .map(|o| o.new_token_ids.len())
            .sum::<usize>();
        let secs = t0.elapsed().as_secs_f64();
        cpu += process_cpu_secs() - c0;
        wall += secs;
        steps += 1;
        if let Some(p) = &probe {
            shares.push(weight_bytes as f64 / secs / p.measure());
        }
    }
    if let Some(mut f) = ctl.as_ref() {
        f.write_all(b"disable\n").unwrap();
    }
    println!(
        "{file}, {threads} threads, batch {batch}, KV {}, prompt {prompt_len}: load+engine {:.0} ms; {steps} decode steps, {tokens} tokens in {wall:.2} s: {:.2} ms/step, {:.1} tok/s",
        kv_cache_dtype.name(),
        load.as_secs_f64() * 1e3,
        wall * 1e3 / steps.max(1) as f64,
        tokens as f64 / wall
    );
    // The CPU time is what a loaded machine does not inflate: set against a roof per
    // CPU-second (`examples/gemm_cpu roof_int8`), it gives the step's share of the roof.
    println!(
        "process CPU {:.1} ms/step ({:.2} CPUs busy while stepping)",
        cpu * 1e3 / steps.max(1) as f64,
        cpu / wall
    );
    if !shares.is_empty() {
        shares.sort_by(f64::total_cmp);
        println!(
            "weights {:.1} MB per step, {:.1} GB/s; weight stream / plain read after each step: median {:.0}% (quartiles {:.0}-{:.0}%)",
            weight_bytes as f64 / 1e6,
            weight_bytes as f64 * steps as f64 / wall / 1e9,
            100.0 * shares[shares.len() / 2],
            100.0 * shares[shares.len() / 4],
            100.0 * shares[shares.len() * 3 / 4],
        );
    }
}

/// The process's CPU seconds so far, all threads (user + system from `/proc/self/stat`, in
/// clock ticks of 10 ms: summed over many steps the ticks average out). 0 off Linux.
fn process_cpu_secs() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The command name, field 2, may hold spaces: count from the ')' closing it. utime and
    // stime are fields 14 and 15, the 12th and 13th after it.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    rest.split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|v| v.parse::<u64>().ok())
        .sum::<u64>() as f64
        / 100.0
}
