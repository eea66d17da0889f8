//! The f32 micro-kernels: `MR` rows of C by one 16-column panel, over `kc` values of k. The AVX2
//! one keeps the `MR x 16` tile in `2 * MR` ymm accumulators (12 at the largest tile, plus two
//! for the panel's k-th 16 values and one broadcast of A), so each k costs 2 loads, `MR`
//! broadcasts and `2 * MR` FMAs. The scalar one performs the same fused multiply-adds in the
//! same order, so the two agree bit for bit.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use super::panels::NR;

/// Most rows of C per call.
pub(crate) const MR: usize = 6;

/// `c[i * ldc + j] = (load ? c[i * ldc + j] : 0) + sum_{kk < kc} a[i * lda + kk] * b[kk * NR + j]`
/// for `i < MR`, `j < NR`, summed in order of `kk` with one fused multiply-add per term.
///
/// # Safety
/// `a` is readable at `i * lda + kk`, `b` at `kk * NR + j` (32-byte aligned for the AVX2 kernel)
/// and `c` readable and writable at `i * ldc + j` for those ranges; the CPU runs the kernel's
/// features.
pub(crate) type TileFn = unsafe fn(
    a: *const f32,
    lda: usize,
    b: *const f32,
    kc: usize,
    c: *mut f32,
    ldc: usize,
    load: bool,
);

/// The AVX2 tiles for 1..=MR rows, at index `mr - 1`.
#[cfg(target_arch = "x86_64")]
pub(crate) const AVX2: [TileFn; MR] = [
    avx2::<1>, avx2::<2>, avx2::<3>, avx2::<4>, avx2::<5>, avx2::<6>,
];

/// The scalar tiles, index as [`AVX2`].
pub(crate) const SCALAR: [TileFn; MR] = [
    scalar::<1>,
    scalar::<2>,
    scalar::<3>,
    scalar::<4>,
    scalar::<5>,
    scalar::<6>,
];

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn avx2<const M: usize>(
    a: *const f32,
    lda: usize,
    b: *const f32,
    kc: usize,
    c: *mut f32,
    ldc: usize,
    load: bool,
) {
    // SAFETY: the `TileFn` contract.
    unsafe {
        let mut lo = [_mm256_setzero_ps(); M];
        let mut hi = [_mm256_setzero_ps(); M];
        if load {
            for i in 0..M {
                lo[i] = _mm256_loadu_ps(c.add(i * ldc));
                hi[i] = _mm256_loadu_ps(c.add(i * ldc + 8));
            }
        }
        let rows: [*const f32; M] = std::array::from_fn(|i| a.add(i * lda));
        for kk in 0..kc {
            let b0 = _mm256_load_ps(b.add(kk * NR));
            let b1 = _mm256_load_ps(b.add(kk * NR + 8));
            for i in 0..M {
                let ai = _mm256_broadcast_ss(&*rows[i].add(kk));
                lo[i] = _mm256_fmadd_ps(ai, b0, lo[i]);
                hi[i] = _mm256_fmadd_ps(ai, b1, hi[i]);
            }
        }
        for i in 0..M {
            _mm256_storeu_ps(c.add(i * ldc), lo[i]);
            _mm256_storeu_ps(c.add(i * ldc + 8), hi[i]);
        }
    }
}

unsafe fn scalar<const M: usize>(
    a: *const f32,
    lda: usize,
    b: *const f32,
    kc: usize,
    c: *mut f32,
    ldc: usize,
    load: bool,
) {
    // SAFETY: the `TileFn` contract.
    unsafe {
        for i in 0..M {
            for j in 0..NR {
                let mut acc = if load { *c.add(i * ldc + j) } else { 0.0 };
                for kk in 0..kc {
                    acc = (*a.add(i * lda + kk)).mul_add(*b.add(kk * NR + j), acc);
                }
                *c.add(i * ldc + j) = acc;
            }
        }
    }
}
