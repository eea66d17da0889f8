//! The encoder GEMMs at MiniLM's and EmbeddingGemma's shapes (n x k), f32 panels
//! (`gemm::gemm_f32`) beside the packed q8_0 matmul the default mode runs (its AVX2 kernels,
//! and its AVX-VNNI ones where the CPU has them), reported as
//! "elements" = FLOPs (2 m n k) per second, each group opening with the f32 and int8 roofs
//! (`--bench roof`'s kernels) so the GEMMs are read against roofs measured under the same load. Env: `GEMM_M=256`
//! picks the row counts (default 32,256,2048), `PAGODA_THREADS=n` sizes the pool.

mod common;

use common::Roof;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use pagoda_kernels::cpu;
use pagoda_kernels::gemm::{F32Panels, gemm_f32};
use pagoda_kernels::matmul::{MatmulScratch, matmul_packed};
use pagoda_kernels::parallel;
use pagoda_kernels::quant::packed::PackedMatrix;
use pagoda_kernels::quant::{GgmlType, quantize_row};
use std::hint::black_box;
use std::time::Duration;

const SHAPES: [(&str, usize, usize); 8] = [
    ("minilm_attn", 384, 384),
    ("minilm_up", 1536, 384),
    ("minilm_down", 384, 1536),
    ("gemma_qkv", 1280, 768),
    ("gemma_gate_up", 2304, 768),
    ("gemma_down", 768, 1152),
    ("gemma_dense_out", 3072, 768),
    ("gemma_dense_in", 768, 3072),
];

fn row_counts() -> Vec<usize> {
    match std::env::var("GEMM_M") {
        Ok(v) => v.split(',').filter_map(|t| t.trim().parse().ok()).collect(),
        Err(_) => vec![32, 256, 2048],
    }
}

fn values(len: usize, seed: usize) -> Vec<f32> {
    (0..len)
        .map(|i| (((i * 7919 + seed) % 1000) as f32 / 500.0) - 1.0)
        .collect()
}

fn bench_gemm(c: &mut Criterion) {
    if let Some(n) = std::env::var("PAGODA_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        parallel::set_num_threads(n);
    }
    for m in row_counts() {
        let mut g = c.benchmark_group(format!("gemm_m{m}"));
        g.warm_up_time(Duration::from_millis(300))
            .measurement_time(Duration::from_secs(1))
            .sample_size(10);
        let threads = parallel::num_threads();
        let roofs = [
            ("roof_f32_fma", Roof::F32Fma),
            ("roof_int8_maddubs", Roof::Int8Pair),
            ("roof_int8_vnni", Roof::Int8Vnni),
        ];
        for (label, roof) in roofs {
            if roof.available() {
                g.throughput(Throughput::Elements(roof.ops(threads)));
                g.bench_function(label, |b| b.iter(|| roof.run(threads)));
            }
        }
        for (name, n, k) in SHAPES {
            let w = values(n * k, 1);
            let x = values(m * k, 2);
            let mut y = vec![0f32; m * n];
            g.throughput(Throughput::Elements((2 * m * n * k) as u64));
            let panels = F32Panels::from_rows(n, k, &w);
            g.bench_function(format!("{name}_{n}x{k}_f32"), |b| {
                b.iter(|| gemm_f32(black_box(&panels), &x, m, &mut y))
            });
            let row = GgmlType::Q8_0.row_bytes(k).unwrap_or(0);
            let mut q = vec![0u8; n * row];
            for (src, dst) in w.chunks_exact(k).zip(q.chunks_exact_mut(row)) {
                quantize_row(GgmlType::Q8_0, src, dst);
            }
            if let Some(p) = PackedMatrix::pack(GgmlType::Q8_0, n, k, &q) {
                let mut scratch = MatmulScratch::default();
                // The AVX2 kernels, then the AVX-VNNI ones where the CPU has them.
                let vnni = cpu::avx_vnni();
                cpu::set_avx_vnni(false);
                g.bench_function(format!("{name}_{n}x{k}_q8_0"), |b| {
                    b.iter(|| matmul_packed(black_box(&p), &x, m, &mut y, &mut scratch))
                });
                if vnni {
                    cpu::set_avx_vnni(true);
                    g.bench_function(format!("{name}_{n}x{k}_q8_0_vnni"), |b| {
                        b.iter(|| matmul_packed(black_box(&p), &x, m, &mut y, &mut scratch))
                    });
                }
            }
        }
        g.finish();
    }
}

criterion_group!(benches, bench_gemm);
criterion_main!(benches);
