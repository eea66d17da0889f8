//! matmul at the real models' shapes (SmolLM2-135M Q4_1 blocks and Q8_0 lm_head; Gemma-3-270m
//! Q5_0/Q4_K blocks and its 262144 x 640 Q8_0 lm_head). t = 1 (decode) reports weight bytes
//! per second; t > 1 (prompt, batched decode) reports "elements" = FLOPs (2 n k t) per second.
//! Env: `MATMUL_T=1,32` picks token counts (default 1,16,32,128,512), `PAGODA_THREADS=n` sizes
//! the pool. `MATMUL_ITERS=n` skips criterion and runs each selected shape n times (with a
//! criterion-style name filter as the first argument), for `perf stat` / callgrind.

mod fixtures;

use criterion::{Criterion, Throughput, criterion_group};
use pagoda_kernels::matmul::{MatmulScratch, matmul, matmul_packed};
use pagoda_kernels::parallel;
use pagoda_kernels::quant::GgmlType;
use pagoda_kernels::quant::packed::PackedMatrix;
use std::hint::black_box;
use std::time::Duration;

const SHAPES: [(&str, GgmlType, usize, usize); 10] = [
    ("smollm_attn_q", GgmlType::Q4_1, 576, 576),
    ("smollm_attn_kv", GgmlType::Q4_1, 192, 576),
    ("smollm_ffn_up", GgmlType::Q4_1, 1536, 576),
    ("smollm_ffn_down", GgmlType::Q4_1, 576, 1536),
    ("smollm_lm_head", GgmlType::Q8_0, 49152, 576),
    ("gemma_attn_q", GgmlType::Q5_0, 1024, 640),
    ("gemma_ffn_up", GgmlType::Q5_0, 2048, 640),
    ("gemma_ffn_down", GgmlType::Q4_K, 640, 2048),
    ("gemma_ffn_down_q6k", GgmlType::Q6_K, 640, 2048),
    ("gemma_lm_head", GgmlType::Q8_0, 262144, 640),
];

fn token_counts() -> Vec<usize> {
    match std::env::var("MATMUL_T") {
        Ok(v) => v.split(',').filter_map(|t| t.trim().parse().ok()).collect(),
        Err(_) => vec![1, 16, 32, 128, 512],
    }
}

fn setup_threads() {
    if let Some(n) = std::env::var("PAGODA_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        parallel::set_num_threads(n);
    }
}

/// The gemma lm_head is 168 M weights; at large t it takes seconds per call.
fn skip(name: &str, t: usize) -> bool {
    name == "gemma_lm_head" && t > 32
}

fn bench_matmul(c: &mut Criterion) {
    setup_threads();
    let shapes = SHAPES;
    for t in token_counts() {
        let mut g = c.benchmark_group(format!("matmul_t{t}"));
        g.warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(2))
            .sample_size(10);
        for &(name, ty, n, k) in &shapes {
            if skip(name, t) {
                continue;
            }
            let w = fixtures::tiled_weights(ty, n, k);
            let x: Vec<f32> = (0..t * k)
                .map(|i| ((i * 13 % 100) as f32 / 50.0) - 1.0)
                .collect();
            let mut y = vec![0f32; t * n];
            let mut scratch = MatmulScratch::default();
            g.throughput(if t == 1 {
                Throughput::Bytes(w.len() as u64)
            } else {
                Throughput::Elements((2 * n * k * t) as u64)
            });
            g.bench_function(format!("{name}_{ty}_{n}x{k}"), |b| {
                b.iter(|| matmul(black_box(&w), ty, n, k, &x, t, &mut y, &mut scratch))
            });
            // The layout the model runs: repacked at load when the type has packed kernels.
            if let Some(p) = PackedMatrix::pack(ty, n, k, &w) {
                g.bench_function(format!("{name}_{ty}_{n}x{k}_packed"), |b| {
                    b.iter(|| matmul_packed(black_box(&p), &x, t, &mut y, &mut scratch))
                });
            }
        }
        g.finish();
    }
}

/// `MATMUL_ITERS` mode: fixed work per shape, timed by wall clock, for perf/callgrind.
fn fixed_iterations(iters: usize) {
    setup_threads();
    let filter = std::env::args().nth(1).filter(|a| !a.starts_with('-'));
    for t in token_counts() {
        for &(name, ty, n, k) in &SHAPES {
            let label = format!("matmul_t{t}/{name}_{ty}_{n}x{k}");
            if skip(name, t) || filter.as_ref().is_some_and(|f| !label.contains(f.as_str())) {
                continue;
            }
            let w = fixtures::tiled_weights(ty, n, k);
            let x: Vec<f32> = (0..t * k)
                .map(|i| ((i * 13 % 100) as f32 / 50.0) - 1.0)
                .collect();
            let mut y = vec![0f32; t * n];
            let mut scratch = MatmulScratch::default();
            let packed = PackedMatrix::pack(ty, n, k, &w);
            let start = std::time::Instant::now();
            for _ in 0..iters {
                match &packed {
                    Some(p) => matmul_packed(black_box(p), &x, t, &mut y, &mut scratch),
                    None => matmul(black_box(&w), ty, n, k, &x, t, &mut y, &mut scratch),
                }
            }
            let secs = start.elapsed().as_secs_f64() / iters as f64;
            let gflops = 2.0 * (n * k * t) as f64 / secs / 1e9;
            let gbs = w.len() as f64 / secs / 1e9;
            println!(
                "{label}: {:.1} us, {gflops:.1} GFLOP/s, {gbs:.2} GB/s weights",
                secs * 1e6
            );
        }
    }
}

criterion_group!(benches, bench_matmul);

fn main() {
    match std::env::var("MATMUL_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        Some(iters) => fixed_iterations(iters),
        None => {
            benches();
            Criterion::default().configure_from_args().final_summary();
        }
    }
}
