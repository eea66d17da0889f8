//! The LoRA kernel at SmolLM2's q projection (576 -> 576, rank 16): a prompt's 128 rows of one
//! adapter, a decode step's 32 rows of one adapter, and 32 rows of eight adapters interleaved
//! (the eight-adapter load). Throughput counts flops: 2 * rank * (in + out) per row.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use pagoda_kernels::lora::{LoraGroups, LoraMats, lora_add};
use std::hint::black_box;

fn data(n: usize, seed: usize) -> Vec<f32> {
    (0..n)
        .map(|i| (((i + seed) * 7919 % 1000) as f32 / 500.0) - 1.0)
        .collect()
}

fn bench_lora(c: &mut Criterion) {
    let (d, rank) = (576, 16);
    let adapters: Vec<(Vec<f32>, Vec<f32>)> = (0..8)
        .map(|s| (data(rank * d, s), data(rank * d, s + 100)))
        .collect();
    let mats = |g: usize| {
        adapters.get(g).map(|(a, bt)| LoraMats {
            a,
            bt,
            rank,
            scale: 0.5,
        })
    };
    let mut g = c.benchmark_group("lora_576x576_r16");
    for (name, rows, adapters) in [
        ("prompt_128_rows_1_adapter", 128, 1),
        ("decode_32_rows_1_adapter", 32, 1),
        ("decode_32_rows_8_adapters", 32, 8),
    ] {
        let x = data(rows * d, 7);
        let mut y = data(rows * d, 8);
        let mut groups = LoraGroups::default();
        groups.plan((0..rows).map(|i| Some((i % adapters) as u32)), adapters);
        g.throughput(Throughput::Elements((2 * rank * (d + d) * rows) as u64));
        g.bench_function(name, |b| {
            b.iter(|| lora_add(black_box(&x), &mut y, &groups, &mats))
        });
    }
    g.finish();
}

criterion_group!(benches, bench_lora);
criterion_main!(benches);
