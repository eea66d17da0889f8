//! Low-rank adapter (LoRA) products added into a linear layer's output rows:
//! `y[i] += scale * B (A x[i])`. A is stored `[rank][in]` and B transposed, `[rank][out]`, so the
//! first product is `rank` dot products over contiguous rows and the second `rank` axpys.

use crate::cpu::{SimdLevel, simd_level};
use crate::ops::use_avx2;

/// The largest rank the kernels take (the intermediate `A x` lives on the stack).
pub const MAX_RANK: usize = 512;

/// `y[i][..out] += scale * sum_j (a[j] . x[i]) * bt[j]` for each of the `n` rows of
/// `x` (`[n][in]`) and `y` (`[n][out]`), with `in = a.len() / rank`, `out = bt.len() / rank`.
/// Each row is computed on its own, so a row's result never depends on the others.
///
/// # Panics
/// If `rank` is 0 or above [`MAX_RANK`], or the slices disagree with the shapes.
pub fn lora_add(x: &[f32], a: &[f32], bt: &[f32], rank: usize, scale: f32, y: &mut [f32]) {
    lora_add_with(simd_level(), x, a, bt, rank, scale, y);
}

/// [`lora_add`] on an explicit SIMD level.
pub fn lora_add_with(
    level: SimdLevel,
    x: &[f32],
    a: &[f32],
    bt: &[f32],
    rank: usize,
    scale: f32,
    y: &mut [f32],
) {
    assert!((1..=MAX_RANK).contains(&rank), "lora_add: rank {rank}");
    let (d_in, d_out) = (a.len() / rank, bt.len() / rank);
    assert!(
        a.len() == rank * d_in && bt.len() == rank * d_out && d_in > 0 && d_out > 0,
        "lora_add: A has {} values and B {} for rank {rank}",
        a.len(),
        bt.len()
    );
    let n = x.len() / d_in;
    assert!(
        x.len() == n * d_in && y.len() == n * d_out,
        "lora_add: {} inputs and {} outputs are not rows of {d_in} and {d_out}",
        x.len(),
        y.len()
    );
    let mut u = [0f32; MAX_RANK];
    let u = &mut u[..rank];
    for (xr, yr) in x.chunks_exact(d_in).zip(y.chunks_exact_mut(d_out)) {
        #[cfg(target_arch = "x86_64")]
        if use_avx2(level) {
            // SAFETY: AVX2 and FMA checked; every row has the lengths asserted above.
            unsafe { avx2::row(xr, a, bt, scale, u, yr) };
            continue;
        }
        let _ = level;
        for (uj, aj) in u.iter_mut().zip(a.chunks_exact(d_in)) {
            *uj = scale * aj.iter().zip(xr).map(|(p, q)| p * q).sum::<f32>();
        }
        for (&uj, bj) in u.iter().zip(bt.chunks_exact(d_out)) {
            for (v, &b) in yr.iter_mut().zip(bj) {
                *v += uj * b;
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    /// One row: `u = scale * A x`, four ranks at a time (each piece of `x` is loaded once for
    /// four rows of A); then `y += u^T Bt`, 32 outputs at a time held in registers across every
    /// rank, so `y` is read and written once instead of once per rank.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn row(
        x: &[f32],
        a: &[f32],
        bt: &[f32],
        scale: f32,
        u: &mut [f32],
        y: &mut [f32],
    ) {
        let (d_in, d_out) = (x.len(), y.len());
        let rank = u.len();
        let mut j = 0;
        while j + 4 <= rank {
            // SAFETY: the caller checked AVX2 and FMA; rows j..j+4 of A exist.
            let d = unsafe { dot4(&a[j * d_in..(j + 4) * d_in], x) };
            for (k, v) in d.into_iter().enumerate() {
                u[j + k] = scale * v;
            }
            j += 4;
        }
        for (uj, aj) in u[j..].iter_mut().zip(a[j * d_in..].chunks_exact(d_in)) {
            // SAFETY: the caller checked AVX2 and FMA.
            *uj = scale * unsafe { dot(aj, x) };
        }
        let mut o = 0;
        while o + 32 <= d_out {
            // SAFETY: o + 32 <= d_out = y.len(), and every row of Bt has d_out values.
            unsafe {
                let p = y.as_mut_ptr().add(o);
                let mut acc = [0usize, 8, 16, 24].map(|k| _mm256_loadu_ps(p.add(k)));
                for (jj, &uj) in u.iter().enumerate() {
                    let s = _mm256_set1_ps(uj);
                    let b = bt.as_ptr().add(jj * d_out + o);
                    for (k, acc) in acc.iter_mut().enumerate() {
                        *acc = _mm256_fmadd_ps(s, _mm256_loadu_ps(b.add(8 * k)), *acc);
                    }
                }
                for (k, acc) in acc.into_iter().enumerate() {
                    _mm256_storeu_ps(p.add(8 * k), acc);
                }
            }
            o += 32;
        }
        while o + 8 <= d_out {
            // SAFETY: o + 8 <= d_out, as above.
            unsafe {
                let p = y.as_mut_ptr().add(o);
                let mut acc = _mm256_loadu_ps(p);
                for (jj, &uj) in u.iter().enumerate() {
                    let b = _mm256_loadu_ps(bt.as_ptr().add(jj * d_out + o));
                    acc = _mm256_fmadd_ps(_mm256_set1_ps(uj), b, acc);
                }
                _mm256_storeu_ps(p, acc);
            }
            o += 8;
        }
        for (k, v) in y.iter_mut().enumerate().skip(o) {
            for (jj, &uj) in u.iter().enumerate() {
                *v += uj * bt[jj * d_out + k];
            }
        }
    }

    /// The dot products of four consecutive rows of `a` (`[4][x.len()]`) with `x`, two
    /// accumulators per row.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn dot4(a: &[f32], x: &[f32]) -> [f32; 4] {
        let n = x.len();
        let mut acc = [[_mm256_setzero_ps(); 2]; 4];
        let mut i = 0;
        while i + 16 <= n {
            // SAFETY: i + 16 <= n, and each of the four rows of `a` has n values.
            unsafe {
                let x0 = _mm256_loadu_ps(x.as_ptr().add(i));
                let x1 = _mm256_loadu_ps(x.as_ptr().add(i + 8));
                for (r, acc) in acc.iter_mut().enumerate() {
                    let pa = a.as_ptr().add(r * n + i);
                    acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(pa), x0, acc[0]);
                    acc[1] = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(8)), x1, acc[1]);
                }
            }
            i += 16;
        }
        let mut out = [0f32; 4];
        for (r, (acc, o)) in acc.iter().zip(&mut out).enumerate() {
            // SAFETY: AVX2 checked by the caller.
            let mut total = unsafe { hsum(_mm256_add_ps(acc[0], acc[1])) };
            for k in i..n {
                total += a[r * n + k] * x[k];
            }
            *o = total;
        }
        out
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn hsum(s: __m256) -> f32 {
        let h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
        let h = _mm_add_ps(h, _mm_movehl_ps(h, h));
        let h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
        _mm_cvtss_f32(h)
    }

    /// `a . b` over equal lengths, four accumulators.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn dot(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut i = 0;
        while i + 32 <= n {
            for (k, acc) in acc.iter_mut().enumerate() {
                // SAFETY: i + 8k + 8 <= i + 32 <= n.
                unsafe {
                    let (pa, pb) = (a.as_ptr().add(i + 8 * k), b.as_ptr().add(i + 8 * k));
                    *acc = _mm256_fmadd_ps(_mm256_loadu_ps(pa), _mm256_loadu_ps(pb), *acc);
                }
            }
            i += 32;
        }
        while i + 8 <= n {
            // SAFETY: i + 8 <= n.
            unsafe {
                let (pa, pb) = (a.as_ptr().add(i), b.as_ptr().add(i));
                acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(pa), _mm256_loadu_ps(pb), acc[0]);
            }
            i += 8;
        }
        let s = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
        let h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
        let h = _mm_add_ps(h, _mm_movehl_ps(h, h));
        let h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
        let mut total = _mm_cvtss_f32(h);
        for k in i..n {
            total += a[k] * b[k];
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::available_levels;

    fn values(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| {
                ((i as u32).wrapping_mul(2654435761).wrapping_add(seed) >> 8) as f32 / 16_777_216.0
                    - 0.5
            })
            .collect()
    }

    #[test]
    fn every_level_matches_the_dense_product() {
        for &(rank, d_in, d_out, n) in &[
            (1, 8, 8, 1),
            (4, 37, 19, 3),
            (6, 50, 70, 2),
            (16, 256, 96, 5),
            (64, 576, 192, 2),
        ] {
            let (x, a, bt) = (
                values(n * d_in, 1),
                values(rank * d_in, 2),
                values(rank * d_out, 3),
            );
            let y0 = values(n * d_out, 4);
            // Reference in f64: y + 0.5 * B (A x).
            let mut want = y0.clone();
            for i in 0..n {
                for o in 0..d_out {
                    let mut s = 0f64;
                    for j in 0..rank {
                        let ax: f64 = (0..d_in)
                            .map(|k| a[j * d_in + k] as f64 * x[i * d_in + k] as f64)
                            .sum();
                        s += ax * bt[j * d_out + o] as f64;
                    }
                    want[i * d_out + o] += (0.5 * s) as f32;
                }
            }
            for level in available_levels() {
                let mut y = y0.clone();
                lora_add_with(level, &x, &a, &bt, rank, 0.5, &mut y);
                for (g, w) in y.iter().zip(&want) {
                    assert!(
                        (g - w).abs() < 1e-4 * (1.0 + w.abs()),
                        "{level:?} rank {rank}: {g} vs {w}"
                    );
                }
            }
        }
    }

    #[test]
    fn rows_are_independent() {
        let (rank, d_in, d_out) = (8, 64, 40);
        let (x, a, bt) = (
            values(4 * d_in, 5),
            values(rank * d_in, 6),
            values(rank * d_out, 7),
        );
        for level in available_levels() {
            let mut all = vec![0f32; 4 * d_out];
            lora_add_with(level, &x, &a, &bt, rank, 2.0, &mut all);
            let mut one = vec![0f32; d_out];
            lora_add_with(level, &x[2 * d_in..3 * d_in], &a, &bt, rank, 2.0, &mut one);
            assert_eq!(one, all[2 * d_out..3 * d_out]);
        }
    }
}
