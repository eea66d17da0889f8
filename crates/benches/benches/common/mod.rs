//! The roof kernels shared by `--bench roof` and `--bench gemm` (which measures them beside
//! each GEMM group, so on this shared machine a GEMM and its roof see the same load):
//! independent dependency chains of one instruction, so only issue throughput limits them.

#![allow(dead_code)] // each bench uses its part

use pagoda_kernels::parallel;
use std::hint::black_box;

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Loop trips per thread and call: long enough that the fork-join is noise (~1 ms).
pub const ITERS: usize = 100_000;
/// Independent chains: latency 4 x 2 ports = 8 in flight at least; 12 leaves slack.
pub const CHAINS: usize = 12;

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

/// Which roof: f32 FMA, the AVX2 int8 pair, AVX-VNNI.
#[derive(Clone, Copy)]
pub enum Roof {
    F32Fma,
    Int8Pair,
    Int8Vnni,
}

impl Roof {
    /// Operations one [`Roof::run`] performs over `threads` threads (FLOPs or int8 ops, two per
    /// multiply-add).
    pub fn ops(self, threads: usize) -> u64 {
        let per_trip = match self {
            Roof::F32Fma => 16,
            Roof::Int8Pair | Roof::Int8Vnni => 64,
        };
        (threads * ITERS * CHAINS * per_trip) as u64
    }

    /// Whether this CPU runs it.
    pub fn available(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            let base = is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma");
            match self {
                Roof::Int8Vnni => base && is_x86_feature_detected!("avxvnni"),
                _ => base,
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        false
    }

    /// Runs the chains once on each of `threads` pool threads.
    ///
    /// # Panics
    /// If the CPU lacks the roof's features ([`Roof::available`]).
    pub fn run(self, threads: usize) {
        assert!(self.available(), "this CPU cannot run the roof");
        #[cfg(target_arch = "x86_64")]
        parallel::run(threads, &|_| {
            // SAFETY: the features were checked above.
            match self {
                Roof::F32Fma => {
                    black_box(unsafe { fma_chains(ITERS) });
                }
                Roof::Int8Pair => {
                    black_box(unsafe { maddubs_chains(ITERS) });
                }
                Roof::Int8Vnni => {
                    black_box(unsafe { dpbusd_chains(ITERS) });
                }
            }
        });
    }
}
