//! matmul at the real models' shapes (SmolLM2-135M Q4_1 blocks and Q8_0 lm_head; Gemma-3-270m
//! Q5_0/Q4_K blocks and its 262144 x 640 Q8_0 lm_head). t = 1 (decode) reports weight bytes
//! per second; t = 64 (prompt) reports "elements" = FLOPs (2 n k t) per second.
//! `PAGODA_THREADS`-style pinning is the parallel module's business; this uses its default.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use pagoda_kernels::matmul::{MatmulScratch, matmul};
use pagoda_kernels::quant::{GgmlType, quantize_row};
use std::hint::black_box;
use std::time::Duration;

/// `n` rows of `k`: 64 distinct quantized rows tiled (the values do not change the speed, and
/// quantizing 168 M weights would dominate the bench's run time).
fn weights(ty: GgmlType, n: usize, k: usize) -> Vec<u8> {
    let row = ty.row_bytes(k).unwrap_or(0);
    let mut pool = vec![0u8; 64 * row];
    for r in 0..64 {
        let src: Vec<f32> = (0..k)
            .map(|i| (((i + 31 * r) * 7919 % 1000) as f32 / 500.0) - 1.0)
            .collect();
        quantize_row(ty, &src, &mut pool[r * row..(r + 1) * row]);
    }
    let mut w = Vec::with_capacity(n * row);
    for r in 0..n {
        w.extend_from_slice(&pool[(r % 64) * row..(r % 64 + 1) * row]);
    }
    w
}

fn bench_matmul(c: &mut Criterion) {
    let shapes = [
        ("smollm_attn_q", GgmlType::Q4_1, 576, 576),
        ("smollm_ffn_up", GgmlType::Q4_1, 1536, 576),
        ("smollm_ffn_down", GgmlType::Q4_1, 576, 1536),
        ("smollm_lm_head", GgmlType::Q8_0, 49152, 576),
        ("gemma_attn_q", GgmlType::Q5_0, 1024, 640),
        ("gemma_ffn_up", GgmlType::Q5_0, 2048, 640),
        ("gemma_ffn_down", GgmlType::Q4_K, 640, 2048),
        ("gemma_ffn_down_q6k", GgmlType::Q6_K, 640, 2048),
        ("gemma_lm_head", GgmlType::Q8_0, 262144, 640),
    ];
    let filter_t: Option<usize> = std::env::var("MATMUL_T").ok().and_then(|v| v.parse().ok());
    for t in [1usize, 64] {
        if filter_t.is_some_and(|f| f != t) {
            continue;
        }
        let mut g = c.benchmark_group(format!("matmul_t{t}"));
        g.warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(2))
            .sample_size(10);
        for &(name, ty, n, k) in &shapes {
            let w = weights(ty, n, k);
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
        }
        g.finish();
    }
}

criterion_group!(benches, bench_matmul);
criterion_main!(benches);
