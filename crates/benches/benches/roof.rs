//! The machine's compute roofs, the ceilings the GEMM benches are read against: the AVX2 f32
//! FMA peak (independent `vfmadd` chains) and the int8 roof of the `vpmaddubsw` + `vpmaddwd`
//! pair (32 multiply-adds per pair, what the AVX2 q8_0 kernels issue per 32 products), both on
//! every pool thread at once; with AVX-VNNI also `vpdpbusd` (the same 32 products in one
//! instruction). "Elements" are FLOPs or int8 ops (2 per multiply-add), so the reported
//! Gelem/s read as GFLOP/s or GOP/s. `PAGODA_THREADS=n` sizes the pool (default: all cores).

mod common;

use common::Roof;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use pagoda_kernels::parallel;
use std::time::Duration;

fn bench_roof(c: &mut Criterion) {
    if let Some(n) = std::env::var("PAGODA_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        parallel::set_num_threads(n);
    }
    let threads = parallel::num_threads();
    let mut g = c.benchmark_group(format!("roof_{threads}threads"));
    g.warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20);
    let roofs = [
        ("f32_fma", Roof::F32Fma),
        ("int8_maddubs_madd", Roof::Int8Pair),
        ("int8_vnni_dpbusd", Roof::Int8Vnni),
    ];
    for (name, roof) in roofs {
        if !roof.available() {
            eprintln!("roof: this CPU cannot run {name}");
            continue;
        }
        g.throughput(Throughput::Elements(roof.ops(threads)));
        g.bench_function(name, |b| b.iter(|| roof.run(threads)));
    }
    g.finish();
}

criterion_group!(benches, bench_roof);
criterion_main!(benches);
