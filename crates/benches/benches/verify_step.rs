//! The cost of a speculative verify step: one sequence's forward pass over k tokens with logits
//! for every row (`Logits::All`, as the runner verifies proposals), at a context of 256, on
//! Qwen2.5-Coder-1.5B Q4_K_M by default; and the packed matmuls of that model at the same row
//! counts, so a rise of T(k) can be traced to a shape and quant type.
//!
//! `cargo bench -p pagoda-benches --bench verify_step` (criterion). Env: `VERIFY_K=1,2,5`
//! picks k (default 1,2,3,4,5,6,8,9,12,16; past 16, up to 512, a prompt chunk of k tokens
//! with the last row's logits, and for the matmuls the prompt kernels; each matmul's GOP/s is
//! printed beside its time), `VERIFY_MODEL` the GGUF file in the model
//! directory (`qwen2.5-coder-0.5b-instruct-q4_k_m.gguf` for the draft's step), `VERIFY_HEAD_ROWS`
//! the output head's rows kept (a draft's narrowed head), `PAGODA_THREADS` the pool (default 2). `VERIFY_ITERS=n` skips criterion and
//! prints the median of n timed runs per point (the forward steps, then the matmuls), for
//! `perf` and for before/after runs interleaved by hand; there `VERIFY_ONLY=forward` or `matmul`
//! runs one half, `VERIFY_SHAPE=gate_up` one matrix, `VERIFY_COLD=24` takes 24 copies of
//! each matrix in turn so that every product reads its weights from memory, as in a forward pass.
#![allow(clippy::unwrap_used)]

use std::hint::black_box;
use std::path::PathBuf;
use std::time::{Duration, Instant};

mod fixtures;

use criterion::{BenchmarkId, Criterion};
use pagoda_kernels::matmul::{MatmulScratch, matmul_packed_into};
use pagoda_kernels::quant::GgmlType;
use pagoda_kernels::quant::packed::PackedMatrix;
use pagoda_model::{CpuExecutor, ForwardBatch, Logits, Model, SeqChunk};

/// Tokens already in the KV cache when the verify step runs.
const CONTEXT: usize = 256;
const BLOCK_SIZE: usize = 16;
/// Largest step: past [`VERIFY_ROWS`] tokens a step is timed as a prompt chunk (logits for
/// its last row only), so `VERIFY_K=512` gives the prompt rate beside the verify steps.
const MAX_STEP: usize = 512;
const VERIFY_ROWS: usize = 16;

/// The 1.5B model's matrices: stacked q/k/v and gate/up as the model runs them (`Weights::
/// stacked`; a layer whose v is Q6_K runs q, k and v apart), the FFN down in both of its
/// types, and the Q6_K output head.
const SHAPES: [(&str, GgmlType, usize, usize); 8] = [
    ("qkv", GgmlType::Q4_K, 1536 + 2 * 256, 1536),
    ("q_or_o", GgmlType::Q4_K, 1536, 1536),
    ("k", GgmlType::Q4_K, 256, 1536),
    ("v_q6k", GgmlType::Q6_K, 256, 1536),
    ("gate_up", GgmlType::Q4_K, 2 * 8960, 1536),
    ("down", GgmlType::Q4_K, 1536, 8960),
    ("down_q6k", GgmlType::Q6_K, 1536, 8960),
    ("lm_head", GgmlType::Q6_K, 151936, 1536),
];

fn ks() -> Vec<usize> {
    match std::env::var("VERIFY_K") {
        Ok(v) => v.split(',').filter_map(|t| t.trim().parse().ok()).collect(),
        Err(_) => vec![1, 2, 3, 4, 5, 6, 8, 9, 12, 16],
    }
}

fn model_path() -> PathBuf {
    let file = std::env::var("VERIFY_MODEL")
        .unwrap_or_else(|_| "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf".into());
    fixtures::model_path(&file)
}

/// The executor with a 256-token context prefilled, and the prompt tokens.
fn prefilled() -> (CpuExecutor, Vec<u32>) {
    let mut model = Model::open(&model_path()).unwrap();
    if let Some(rows) = std::env::var("VERIFY_HEAD_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        model.keep_head_rows(rows).unwrap();
    }
    let vocab = model.config().vocab_size as u32;
    let blocks = (CONTEXT + MAX_STEP).div_ceil(BLOCK_SIZE);
    let mut exec = CpuExecutor::new(model, blocks, BLOCK_SIZE).unwrap();
    let tokens: Vec<u32> = (0..(CONTEXT + MAX_STEP) as u32)
        .map(|i| 100 + (i * 7919) % (vocab - 200))
        .collect();
    let table: Vec<u32> = (0..blocks as u32).collect();
    let warm = ForwardBatch::from_seqs(
        &[SeqChunk {
            tokens: &tokens[..CONTEXT],
            start: 0,
            block_tables: std::slice::from_ref(&table),
            logits: Logits::Last,
        }],
        BLOCK_SIZE,
    );
    exec.forward(&warm).unwrap();
    (exec, tokens)
}

/// The verify step of `k` tokens after the context (a prompt chunk past [`VERIFY_ROWS`]).
fn step(tokens: &[u32], table: &[u32], k: usize) -> ForwardBatch {
    assert!(k <= MAX_STEP, "steps of at most {MAX_STEP} tokens");
    ForwardBatch::from_seqs(
        &[SeqChunk {
            tokens: &tokens[CONTEXT..CONTEXT + k],
            start: CONTEXT,
            block_tables: std::slice::from_ref(&table.to_vec()),
            logits: if k <= VERIFY_ROWS {
                Logits::All
            } else {
                Logits::Last
            },
        }],
        BLOCK_SIZE,
    )
}

/// `n` rows of `k`: 64 distinct quantized rows tiled (the values do not change the speed).
fn weights(ty: GgmlType, n: usize, k: usize) -> PackedMatrix {
    PackedMatrix::pack(ty, n, k, &fixtures::tiled_weights(ty, n, k))
        .expect("an AVX2 CPU (packed kernels)")
}

fn activations(t: usize, k: usize) -> Vec<f32> {
    (0..t * k)
        .map(|i| ((i * 13 % 100) as f32 / 50.0) - 1.0)
        .collect()
}

/// Nanoseconds this thread has run on a CPU (Linux's schedstat; 0 elsewhere). With
/// `PAGODA_THREADS=1` every kernel runs on the calling thread, and its CPU time does not count
/// the time other processes held the core, which wall time on a shared machine does.
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Median and minimum of `iters` timed runs after one untimed, and this thread's mean CPU
/// time per run, in ms (on a shared machine the minimum, or the CPU time of a one-thread run,
/// is the steadier figure for comparing kernels).
fn timed_ms(iters: usize, mut f: impl FnMut()) -> (f64, f64, f64) {
    f();
    let cpu0 = thread_cpu_ns();
    let mut times: Vec<f64> = (0..iters)
        .map(|_| {
            let t0 = Instant::now();
            f();
            t0.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    let cpu = (thread_cpu_ns() - cpu0) as f64 / 1e6 / iters as f64;
    times.sort_by(f64::total_cmp);
    (times[iters / 2], times[0], cpu)
}

fn fixed_iterations(iters: usize) {
    let only = std::env::var("VERIFY_ONLY").unwrap_or_default();
    if only != "matmul" {
        fixed_forward(iters);
    }
    if only != "forward" {
        fixed_matmul(iters);
    }
}

fn fixed_forward(iters: usize) {
    let (mut exec, tokens) = prefilled();
    let table: Vec<u32> = (0..(CONTEXT + MAX_STEP).div_ceil(BLOCK_SIZE) as u32).collect();
    let mut t1 = None;
    for k in ks() {
        let batch = step(&tokens, &table, k);
        let (ms, min, cpu) = timed_ms(iters, || {
            black_box(exec.forward(&batch).unwrap());
        });
        let base = *t1.get_or_insert(ms);
        println!(
            "forward k={k:2}: median {ms:7.2} ms (min {min:7.2}, thread cpu {cpu:7.2})  T(k)/T(1) {:.2}",
            ms / base
        );
    }
}

fn fixed_matmul(iters: usize) {
    let shape = std::env::var("VERIFY_SHAPE").unwrap_or_default();
    for &(name, ty, n, kk) in SHAPES.iter().filter(|s| shape.is_empty() || s.0 == shape) {
        // `VERIFY_COLD=n`: n copies of the matrix taken in turn, so each product streams its
        // weights from memory as a forward pass does (n x the matrix well past the L3).
        let copies: usize = std::env::var("VERIFY_COLD")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1)
            .max(1);
        let ps: Vec<PackedMatrix> = (0..copies).map(|_| weights(ty, n, kk)).collect();
        let mut turn = 0usize;
        let mut next = || {
            turn = (turn + 1) % copies;
            &ps[turn]
        };
        let mut scratch = MatmulScratch::default();
        let mut line = format!("{name:>9} {ty} {n}x{kk} us:");
        let mut base = None;
        // Past 16 rows a product takes the prompt kernels: `VERIFY_K=16,17,32,64` puts a
        // decode batch's kernels beside them on the same weights.
        for t in ks().into_iter().filter(|&t| t <= MAX_STEP) {
            let x = activations(t, kk);
            let mut y = vec![0f32; t * n];
            // Enough runs for ~0.3 s: the CPU clock advances in scheduler ticks.
            let t0 = Instant::now();
            matmul_packed_into(next(), &x, t, &mut [&mut y], &mut scratch);
            let once = t0.elapsed().as_secs_f64();
            let iters = iters.max((0.3 / once) as usize).min(2000);
            let (_, min, cpu) = timed_ms(iters, || {
                matmul_packed_into(black_box(next()), &x, t, &mut [&mut y], &mut scratch)
            });
            // One thread: its CPU time; several: the fastest wall time.
            let us = 1e3
                * if pagoda_kernels::parallel::num_threads() == 1 {
                    cpu
                } else {
                    min
                };
            let b = *base.get_or_insert(us);
            // int8 ops (2 per multiply-add) per second, as `--bench roof` counts them.
            let gops = 2.0 * (n * kk * t) as f64 / us / 1e3;
            line += &format!(" k{t}={us:.0}us({:.2},{gops:.0}GOP/s)", us / b);
        }
        println!("{line}");
    }
}

fn criterion_benches(c: &mut Criterion) {
    let (mut exec, tokens) = prefilled();
    let table: Vec<u32> = (0..(CONTEXT + MAX_STEP).div_ceil(BLOCK_SIZE) as u32).collect();
    let threads = pagoda_kernels::parallel::num_threads();
    let mut g = c.benchmark_group(format!("verify_step/{threads}t"));
    g.sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5));
    for k in ks() {
        let batch = step(&tokens, &table, k);
        g.bench_function(BenchmarkId::new("forward", k), |b| {
            b.iter(|| black_box(exec.forward(&batch).unwrap()[0]))
        });
    }
    g.finish();
    drop(exec);
    let mut g = c.benchmark_group(format!("verify_matmul/{threads}t"));
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    for &(name, ty, n, kk) in &SHAPES {
        let p = weights(ty, n, kk);
        let mut scratch = MatmulScratch::default();
        for t in ks().into_iter().filter(|&t| t <= VERIFY_ROWS) {
            let x = activations(t, kk);
            let mut y = vec![0f32; t * n];
            g.bench_function(BenchmarkId::new(format!("{name}_{ty}_{n}x{kk}"), t), |b| {
                b.iter(|| matmul_packed_into(black_box(&p), &x, t, &mut [&mut y], &mut scratch))
            });
        }
    }
    g.finish();
}

fn main() {
    let threads = std::env::var("PAGODA_THREADS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(2);
    pagoda_kernels::parallel::set_num_threads(threads);
    match std::env::var("VERIFY_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        Some(iters) => fixed_iterations(iters),
        None => {
            let mut c = Criterion::default().configure_from_args();
            criterion_benches(&mut c);
            c.final_summary();
        }
    }
}
