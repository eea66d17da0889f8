//! One weight row dotted with one activation row (already in the vec_dot_type), per type and
//! SIMD level, at k = 4096. Throughput is weight bytes per second.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use pagoda_kernels::cpu;
use pagoda_kernels::quant::{GgmlType, quantize_activations, quantize_row, vec_dot};
use std::hint::black_box;
use std::time::Duration;

fn data(n: usize, seed: usize) -> Vec<f32> {
    (0..n)
        .map(|i| (((i + seed) * 7919 % 1000) as f32 / 500.0) - 1.0)
        .collect()
}

fn bench_vec_dot(c: &mut Criterion) {
    const K: usize = 4096;
    let mut g = c.benchmark_group("vec_dot");
    g.warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    for ty in [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q8_0,
        GgmlType::Q4_K,
        GgmlType::Q6_K,
    ] {
        let Some(vdt) = ty.vec_dot_type() else {
            continue;
        };
        let (Some(wb), Some(ab)) = (ty.row_bytes(K), vdt.row_bytes(K)) else {
            continue;
        };
        let mut w = vec![0u8; wb];
        quantize_row(ty, &data(K, 1), &mut w);
        let mut a = vec![0u8; ab];
        quantize_activations(vdt, &data(K, 2), &mut a);
        g.throughput(Throughput::Bytes(wb as u64));
        for level in cpu::available_levels() {
            g.bench_function(format!("{ty}/{level:?}"), |b| {
                b.iter(|| vec_dot(level, ty, black_box(&w), black_box(&a)))
            });
        }
    }
    g.finish();

    let mut g = c.benchmark_group("quantize_activations");
    g.warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(1));
    for vdt in [GgmlType::Q8_0, GgmlType::Q8_1, GgmlType::Q8_K] {
        let x = data(K, 3);
        let mut a = vec![0u8; vdt.row_bytes(K).unwrap_or(0)];
        g.throughput(Throughput::Elements(K as u64));
        g.bench_function(vdt.name(), |b| {
            b.iter(|| quantize_activations(vdt, black_box(&x), &mut a))
        });
    }
    g.finish();
}

criterion_group!(benches, bench_vec_dot);
criterion_main!(benches);
