//! RMSNorm: `out = x / sqrt(mean(x^2) + eps) * w`. Follows ggml
//! (`ggml_compute_forward_rms_norm_f32`): the sum of squares is accumulated in f64, and the row is
//! scaled first and multiplied by the weight after (`ggml_mul`), so rounding matches llama.cpp.

use super::use_avx2;
use crate::cpu::{SimdLevel, simd_level};

/// `out = rms_norm(x) * w` for one row.
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    rms_norm_with(simd_level(), x, w, eps, out);
}

/// In-place `x = rms_norm(x) * w` for one row.
pub fn rms_norm_inplace(x: &mut [f32], w: &[f32], eps: f32) {
    rms_norm_inplace_with(simd_level(), x, w, eps);
}

/// `x` is rows of `w.len()` values; each row is normalised in place (per-head q/k norm, batches).
pub fn rms_norm_rows(x: &mut [f32], w: &[f32], eps: f32) {
    let level = simd_level();
    debug_assert!(
        !w.is_empty() && x.len().is_multiple_of(w.len()),
        "rms_norm_rows: ragged rows"
    );
    for row in x.chunks_exact_mut(w.len()) {
        rms_norm_inplace_with(level, row, w, eps);
    }
}

/// [`rms_norm`] on an explicit SIMD level.
pub fn rms_norm_with(level: SimdLevel, x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    assert!(
        x.len() == w.len() && out.len() == x.len(),
        "rms_norm: length mismatch"
    );
    let scale = inv_rms(level, x, eps);
    #[cfg(target_arch = "x86_64")]
    if use_avx2(level) {
        // SAFETY: AVX2+FMA checked; lengths checked above.
        unsafe { avx2::scale_mul(x, scale, w, out) };
        return;
    }
    for ((o, &xi), &wi) in out.iter_mut().zip(x).zip(w) {
        *o = (xi * scale) * wi;
    }
}

/// [`rms_norm_inplace`] on an explicit SIMD level.
pub fn rms_norm_inplace_with(level: SimdLevel, x: &mut [f32], w: &[f32], eps: f32) {
    assert!(x.len() == w.len(), "rms_norm_inplace: length mismatch");
    let scale = inv_rms(level, x, eps);
    #[cfg(target_arch = "x86_64")]
    if use_avx2(level) {
        // SAFETY: AVX2+FMA checked; lengths checked above.
        unsafe { avx2::scale_mul_inplace(x, scale, w) };
        return;
    }
    for (xi, &wi) in x.iter_mut().zip(w) {
        *xi = (*xi * scale) * wi;
    }
}

fn inv_rms(level: SimdLevel, x: &[f32], eps: f32) -> f32 {
    #[cfg(target_arch = "x86_64")]
    let sum = if use_avx2(level) {
        // SAFETY: AVX2+FMA checked.
        unsafe { avx2::sum_sq(x) }
    } else {
        x.iter().map(|&v| f64::from(v * v)).sum::<f64>()
    };
    #[cfg(not(target_arch = "x86_64"))]
    let sum = {
        let _ = level;
        x.iter().map(|&v| f64::from(v * v)).sum::<f64>()
    };
    let mean = (sum / x.len().max(1) as f64) as f32;
    1.0 / (mean + eps).sqrt()
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::super::math::{hsum256d, load_partial, store_partial};
    use std::arch::x86_64::*;

    /// Sum of squares, each square rounded to f32 (as ggml does) and summed in f64.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn sum_sq(x: &[f32]) -> f64 {
        let mut acc0 = _mm256_setzero_pd();
        let mut acc1 = _mm256_setzero_pd();
        let chunks = x.chunks_exact(8);
        let tail = chunks.remainder();
        for c in chunks {
            // SAFETY: c has 8 floats.
            let v = unsafe { _mm256_loadu_ps(c.as_ptr()) };
            let sq = _mm256_mul_ps(v, v);
            acc0 = _mm256_add_pd(acc0, _mm256_cvtps_pd(_mm256_castps256_ps128(sq)));
            acc1 = _mm256_add_pd(acc1, _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(sq)));
        }
        let tail_sum: f64 = tail.iter().map(|&v| f64::from(v * v)).sum();
        hsum256d(_mm256_add_pd(acc0, acc1)) + tail_sum
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn scale_mul(x: &[f32], scale: f32, w: &[f32], out: &mut [f32]) {
        let n = x.len();
        let s = _mm256_set1_ps(scale);
        let mut i = 0;
        while i + 8 <= n {
            // SAFETY: i + 8 <= n and all three slices have length n.
            unsafe {
                let v = _mm256_mul_ps(_mm256_loadu_ps(x.as_ptr().add(i)), s);
                let v = _mm256_mul_ps(v, _mm256_loadu_ps(w.as_ptr().add(i)));
                _mm256_storeu_ps(out.as_mut_ptr().add(i), v);
            }
            i += 8;
        }
        if i < n {
            let r = n - i;
            // SAFETY: r floats remain in each slice.
            unsafe {
                let v = _mm256_mul_ps(load_partial(x.as_ptr().add(i), r), s);
                let v = _mm256_mul_ps(v, load_partial(w.as_ptr().add(i), r));
                store_partial(out.as_mut_ptr().add(i), r, v);
            }
        }
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn scale_mul_inplace(x: &mut [f32], scale: f32, w: &[f32]) {
        let n = x.len();
        let s = _mm256_set1_ps(scale);
        let mut i = 0;
        while i + 8 <= n {
            // SAFETY: i + 8 <= n and both slices have length n.
            unsafe {
                let p = x.as_mut_ptr().add(i);
                let v = _mm256_mul_ps(_mm256_loadu_ps(p), s);
                _mm256_storeu_ps(p, _mm256_mul_ps(v, _mm256_loadu_ps(w.as_ptr().add(i))));
            }
            i += 8;
        }
        for j in i..n {
            x[j] = (x[j] * scale) * w[j];
        }
    }
}
