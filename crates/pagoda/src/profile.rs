//! `pagoda profile`: times this machine's forward passes for one model on a small grid
//! (prefill chunks of T tokens, decode steps of B sequences at two contexts, sampling one row)
//! and writes the cost profile `pagoda plan --profile` reads. The planner's model of a step
//! (pagoda-capacity's `step_cost.rs`) is fitted to these points.
//!
//! Timings run the executor directly on synthetic batches: what a K/V block holds does not
//! change how long reading it takes, so no prompt has to be prefilled before a decode at
//! context C is timed, and a whole profile takes seconds.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use clap::Args;
use pagoda_capacity::step_cost::median;
use pagoda_capacity::{CostProfile, DecodePoint, KvBytes, Machine, ModelInfo, PrefillPoint};
use pagoda_core::SamplingParams;
use pagoda_model::{CpuExecutor, ForwardBatch, KvCacheDtype, Logits, Sampler, SeqChunk};

use crate::model_path;

/// Tokens per KV block of the timed arena (the server's default).
const BLOCK_SIZE: usize = 16;
/// The arena the decode batches read: blocks past it wrap around (their bytes are as far
/// from the cache as distinct ones once it is larger than the last-level cache).
const ARENA_BYTES: u64 = 512 << 20;
/// Prefill chunks timed (tokens, context before them). The 256-token chunk (the server's
/// per-sequence cap) after four contexts: the planner fits the prompt attention slope through
/// them; from two single timings (contexts 0 and 1,024) it came out ~2.2 us a pair on the 1.5B
/// and long prompts 5-10% slower than the server ran them.
const PREFILL: &[(usize, usize)] = &[
    (64, 0),
    (256, 0),
    (512, 0),
    (256, 512),
    (256, 1024),
    (256, 2048),
];
/// Decode batches timed, each at both contexts.
const DECODE_SEQS: &[usize] = &[1, 4, 16, 32];
const DECODE_CONTEXTS: &[usize] = &[128, 1024];
/// Rounds over the grid when `pagoda plan` profiles this machine itself.
pub const DEFAULT_ROUNDS: usize = 5;

#[derive(Args, Clone, Debug)]
pub struct ProfileArgs {
    /// Model: a GGUF file, a Hugging Face checkpoint directory, or a catalog name.
    #[arg(long)]
    pub model: PathBuf,
    /// Write the profile here (default: standard output).
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    /// KV element type to time (the server's --kv-cache-dtype).
    #[arg(long, default_value = "f16", value_parser = ["f32", "f16", "int8"])]
    pub kv_cache_dtype: String,
    /// Compute threads [default: all cores].
    #[arg(long)]
    pub threads: Option<usize>,
    /// Quantization of a Hugging Face checkpoint's matrices (as `serve`).
    #[arg(long, default_value = "q8_0", value_parser = ["q8_0", "q4_k", "q4_0", "none"])]
    pub quantization: String,
    /// Rounds over the whole grid; each shape keeps its median round. More rounds give a
    /// steadier profile on a machine whose speed drifts (each round takes a few seconds).
    #[arg(long, default_value_t = DEFAULT_ROUNDS as u32, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub rounds: u32,
    /// Skip the served decode steps (a server on a loopback port in this process, about half a
    /// minute on a 1.5B model): the plan then prices bare forwards, which ran 4-10% quicker
    /// than served steps here.
    #[arg(long)]
    pub no_served: bool,
}

pub fn run(args: ProfileArgs) -> anyhow::Result<()> {
    let path = model_path::resolve(Some(args.model.clone()), false)?;
    crate::engine_args::set_threads(args.threads)?;
    let quantization = pagoda_hf::Quantization::from_name(&args.quantization)
        .with_context(|| format!("--quantization {}", args.quantization))?;
    let profile = measure(
        &path,
        &args.kv_cache_dtype,
        quantization,
        args.rounds as usize,
        !args.no_served,
    )?;
    let json = profile.to_json();
    match &args.output {
        Some(out) => {
            std::fs::write(out, json).with_context(|| format!("cannot write {}", out.display()))?;
            eprintln!("wrote {}", out.display());
        }
        None => println!("{json}"),
    }
    Ok(())
}

/// Load the model at `path` and time it.
pub fn measure(
    path: &Path,
    kv_dtype: &str,
    quantization: pagoda_hf::Quantization,
    rounds: usize,
    served: bool,
) -> anyhow::Result<CostProfile> {
    let started = Instant::now();
    let opened = pagoda_server::open_model(path, quantization)
        .with_context(|| format!("cannot load model {}", path.display()))?;
    let mut model = opened.model;
    let mut kv_bytes = KvBytes::default();
    for (name, slot) in [
        ("f32", &mut kv_bytes.f32),
        ("f16", &mut kv_bytes.f16),
        ("int8", &mut kv_bytes.int8),
    ] {
        let dtype: KvCacheDtype = name.parse().context("KV dtype")?;
        model.set_kv_cache_dtype(dtype);
        *slot = model.config().kv_bytes_per_token() as u64;
    }
    let kv_cache_dtype: KvCacheDtype = kv_dtype.parse().context("--kv-cache-dtype")?;
    model.set_kv_cache_dtype(kv_cache_dtype);
    let config = model.config().clone();
    let bytes_per_token = config.kv_bytes_per_token().max(1) as u64;
    let num_blocks = (ARENA_BYTES / (bytes_per_token * BLOCK_SIZE as u64)).max(8) as usize;
    let mut exec = CpuExecutor::new(model, num_blocks, BLOCK_SIZE)
        .map_err(|e| anyhow::anyhow!("cannot build the executor: {e}"))?;
    // A warm-up: the first pass pages in weights and grows scratch buffers. The largest chunk
    // and decode batch get one too: timed cold (buffers grown inside the timed pass), a 1.5B
    // model's 256- and 512-token chunks read 5% and 9% slower and its 16-sequence decode 22%
    // slower (docs/capacity.md, "Predictions against sweeps").
    time_batch(&mut exec, &[(16, 0)])?;
    let largest = PREFILL.iter().map(|&(n, _)| n).max().unwrap_or(1);
    time_batch(&mut exec, &[(largest, 0)])?;
    let seqs = DECODE_SEQS.iter().copied().max().unwrap_or(1);
    let context = DECODE_CONTEXTS.iter().copied().max().unwrap_or(0);
    time_batch(&mut exec, &vec![(1, context); seqs])?;
    // Every shape once per round, the rounds one after another, so a drift of the machine's
    // speed (this one's moved a shape by 10-20% between runs minutes apart) falls on all
    // shapes alike; the median round is kept, a typical step rather than the quickest one
    // (the quickest of two made every plan optimistic against the sweeps).
    let shapes: Vec<Vec<(usize, usize)>> = PREFILL
        .iter()
        .map(|&(tokens, context)| vec![(tokens, context)])
        .chain(DECODE_CONTEXTS.iter().flat_map(|&context| {
            DECODE_SEQS
                .iter()
                .map(move |&seqs| vec![(1, context); seqs])
        }))
        .collect();
    let mut times = vec![Vec::with_capacity(rounds); shapes.len()];
    for _ in 0..rounds.max(1) {
        for (shape, secs) in shapes.iter().zip(&mut times) {
            secs.push(time_batch(&mut exec, shape)?);
        }
    }
    let typical: Vec<f64> = times
        .iter()
        .map(|t| median(t.clone()).unwrap_or(0.0))
        .collect();
    let spread = times
        .iter()
        .map(|t| {
            let lo = t.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = t.iter().copied().fold(0.0, f64::max);
            if lo > 0.0 { hi / lo - 1.0 } else { 0.0 }
        })
        .fold(0.0f64, f64::max);
    let prefill: Vec<PrefillPoint> = PREFILL
        .iter()
        .zip(&typical)
        .map(|(&(tokens, context), &secs)| PrefillPoint {
            tokens,
            context,
            secs,
        })
        .collect();
    let decode: Vec<DecodePoint> = DECODE_CONTEXTS
        .iter()
        .flat_map(|&context| DECODE_SEQS.iter().map(move |&seqs| (seqs, context)))
        .zip(&typical[PREFILL.len()..])
        .map(|((seqs, context), &secs)| DecodePoint {
            seqs,
            context,
            secs,
        })
        .collect();
    if rounds > 1 {
        eprintln!(
            "{rounds} rounds; the widest spread of a shape's rounds: {:.0}% (slowest over quickest)",
            spread * 100.0
        );
    }
    let sample_secs_per_seq = time_sampling(exec.vocab_size());
    // The forwards' model leaves memory before the server loads its own copy.
    drop(exec);
    let served_decode = if served {
        let points = crate::profile_served::measure(path, kv_cache_dtype, quantization)
            .context("timing served decode steps (`pagoda profile --no-served` skips them)")?;
        for p in &points {
            eprintln!(
                "served: a decode step of {} sequences {:.1} ms",
                p.seqs,
                p.secs * 1e3
            );
        }
        points
    } else {
        Vec::new()
    };
    let file_bytes = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    eprintln!("profiled in {:.1} s", started.elapsed().as_secs_f64());
    Ok(CostProfile {
        version: pagoda_capacity::profile::PROFILE_VERSION,
        machine: machine(),
        model: ModelInfo {
            name: path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            file_bytes,
            n_layers: config.n_layers,
            context_length: config.context_length,
        },
        kv_cache_dtype: kv_dtype.to_owned(),
        kv_bytes_per_token: kv_bytes,
        kv_budget_bytes: pagoda_core::config::default_kv_budget(),
        block_size: BLOCK_SIZE,
        prefill,
        decode,
        sample_secs_per_seq,
        step_overhead_secs: 0.0,
        served_decode,
    })
}

/// Seconds of one forward over `seqs` (new tokens, context before them), with logits for each
/// sequence's last token, as a step samples.
fn time_batch(exec: &mut CpuExecutor, seqs: &[(usize, usize)]) -> anyhow::Result<f64> {
    let num_blocks = exec.kv_cache.num_blocks();
    let groups = exec.kv_cache.plan().num_groups();
    let tokens: Vec<Vec<u32>> = seqs.iter().map(|&(n, _)| vec![0u32; n]).collect();
    let mut next = 0usize;
    let tables: Vec<Vec<Vec<u32>>> = seqs
        .iter()
        .map(|&(n, context)| {
            let blocks = (context + n).div_ceil(BLOCK_SIZE);
            let table: Vec<u32> = (0..blocks)
                .map(|_| {
                    next += 1;
                    (next % num_blocks) as u32
                })
                .collect();
            vec![table; groups]
        })
        .collect();
    let chunks: Vec<SeqChunk<'_>> = seqs
        .iter()
        .enumerate()
        .map(|(i, &(_, context))| SeqChunk {
            tokens: &tokens[i],
            start: context,
            block_tables: &tables[i],
            logits: Logits::Last,
        })
        .collect();
    let batch = ForwardBatch::from_seqs(&chunks, BLOCK_SIZE);
    let t = Instant::now();
    exec.forward(&batch)
        .map_err(|e| anyhow::anyhow!("forward pass of {seqs:?} failed: {e}"))?;
    Ok(t.elapsed().as_secs_f64())
}

/// Seconds to sample one row of `vocab` logits with Qwen's recommended settings (temperature
/// 0.7, top-p 0.8, top-k 20), the kind of sampling a served request gets.
fn time_sampling(vocab: usize) -> f64 {
    let logits: Vec<f32> = (0..vocab)
        .map(|i| ((i * 7919) % 1000) as f32 / 100.0)
        .collect();
    let params = SamplingParams {
        temperature: 0.7,
        top_p: 0.8,
        top_k: 20,
        ..SamplingParams::default()
    };
    let mut sampler = Sampler::new(params, 0);
    let rounds = 20;
    let t = Instant::now();
    for _ in 0..rounds {
        let _ = sampler.sample(&logits);
    }
    t.elapsed().as_secs_f64() / f64::from(rounds)
}

fn machine() -> Machine {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_default();
    let load_average = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|t| t.split_whitespace().next().and_then(|v| v.parse().ok()));
    Machine {
        cpu,
        threads: pagoda_kernels::parallel::num_threads(),
        simd: format!("{:?}", pagoda_kernels::cpu::simd_level()),
        load_average,
    }
}
