//! The machine's compute roofs, the ceilings the GEMM benches are read against: the AVX2 f32
//! FMA peak (independent `vfmadd` chains) and the int8 roof of the `vpmaddubsw` + `vpmaddwd`
//! pair (32 multiply-adds per pair, what the q8_0 kernels issue per 32 products), both on every
//! pool thread at once; with AVX-VNNI also `vpdpbusd` (the same 32 products in one
//! instruction), for reference. "Elements" are FLOPs or int8 ops (2 per multiply-add), so the
//! reported Gelem/s read as GFLOP/s or GOP/s. `PAGODA_THREADS=n` sizes the pool (default: all
//! cores).

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use pagoda_kernels::parallel;
use std::hint::black_box;
use std::time::Duration;

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Loop trips per thread and call: long enough that the fork-join is noise (~1 ms).
const ITERS: usize = 100_000;
/// Independent chains: latency 4 x 2 ports = 8 in flight at least; 12 leaves slack.
const CHAINS: usize = 12;

/// `ITERS` trips of `CHAINS` independent FMA chains (16 FLOPs each per trip).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn fma_chains(iters: usize) -> f32 {
    // Opaque operands: with constants the compiler may fold the chains away.
    let a = _mm256_set1_ps(black_box(0.999));
    let b = _mm256_set1_ps(black_box(1e-3));
    let mut acc = [_mm256_set1_ps(black_box(0.5)); CHAINS];
    for _ in 0..iters {
        for v in &mut acc {
            *v = _mm256_fmadd_ps(*v, a, b);
        }
    }
    let mut s = _mm256_setzero_ps();
    for v in acc {
        s = _mm256_add_ps(s, v);
    }
    _mm256_cvtss_f32(s)
}

/// `ITERS` trips of `CHAINS` chains of `maddubs` then `madd` (32 int8 multiply-adds per pair),
/// each link feeding the next so nothing is hoisted out of the loop.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn maddubs_chains(iters: usize) -> i32 {
    let w = _mm256_set1_epi8(black_box(3));
    let ones = _mm256_set1_epi16(1);
    let mut x = [_mm256_set1_epi8(black_box(1)); CHAINS];
    for _ in 0..iters {
        for v in &mut x {
            *v = _mm256_madd_epi16(_mm256_maddubs_epi16(*v, w), ones);
        }
    }
    let mut s = _mm256_setzero_si256();
    for v in x {
        s = _mm256_add_epi32(s, v);
    }
    _mm256_cvtsi256_si32(s)
}

/// `ITERS` trips of `CHAINS` `vpdpbusd` chains (32 int8 multiply-adds each).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,avxvnni")]
fn dpbusd_chains(iters: usize) -> i32 {
    let w = _mm256_set1_epi8(black_box(3));
    let a = _mm256_set1_epi8(black_box(1));
    let mut acc = [_mm256_setzero_si256(); CHAINS];
    for _ in 0..iters {
        for v in &mut acc {
            *v = _mm256_dpbusd_avx_epi32(*v, a, w);
        }
    }
    let mut s = _mm256_setzero_si256();
    for v in acc {
        s = _mm256_add_epi32(s, v);
    }
    _mm256_cvtsi256_si32(s)
}

fn bench_roof(c: &mut Criterion) {
    if let Some(n) = std::env::var("PAGODA_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        parallel::set_num_threads(n);
    }
    #[cfg(target_arch = "x86_64")]
    {
        if !(is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")) {
            eprintln!("roof: no AVX2+FMA on this CPU, nothing to measure");
            return;
        }
        let threads = parallel::num_threads();
        let per_call = (threads * ITERS * CHAINS) as u64;
        let mut g = c.benchmark_group(format!("roof_{threads}threads"));
        g.warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(2))
            .sample_size(20);
        g.throughput(Throughput::Elements(per_call * 16));
        g.bench_function("f32_fma", |b| {
            // SAFETY: AVX2+FMA checked above.
            b.iter(|| {
                parallel::run(threads, &|_| {
                    black_box(unsafe { fma_chains(ITERS) });
                })
            })
        });
        g.throughput(Throughput::Elements(per_call * 64));
        g.bench_function("int8_maddubs_madd", |b| {
            // SAFETY: AVX2 checked above.
            b.iter(|| {
                parallel::run(threads, &|_| {
                    black_box(unsafe { maddubs_chains(ITERS) });
                })
            })
        });
        if is_x86_feature_detected!("avxvnni") {
            g.bench_function("int8_vnni_dpbusd", |b| {
                // SAFETY: AVX-VNNI checked above.
                b.iter(|| {
                    parallel::run(threads, &|_| {
                        black_box(unsafe { dpbusd_chains(ITERS) });
                    })
                })
            });
        }
        g.finish();
    }
}

criterion_group!(benches, bench_roof);
criterion_main!(benches);
