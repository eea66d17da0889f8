//! Vector arithmetic used between layers: residual adds and scaling.

use super::use_avx2;
use crate::cpu::{SimdLevel, simd_level};

/// `x += y`.
pub fn add_inplace(x: &mut [f32], y: &[f32]) {
    add_inplace_with(simd_level(), x, y);
}

/// `x *= s`.
pub fn scale_inplace(x: &mut [f32], s: f32) {
    scale_inplace_with(simd_level(), x, s);
}

/// [`add_inplace`] on an explicit SIMD level.
pub fn add_inplace_with(level: SimdLevel, x: &mut [f32], y: &[f32]) {
    assert_eq!(x.len(), y.len(), "add_inplace: length mismatch");
    #[cfg(target_arch = "x86_64")]
    if use_avx2(level) {
        // SAFETY: AVX2 checked; lengths equal.
        unsafe { avx2::add(x, y) };
        return;
    }
    let _ = level;
    for (a, &b) in x.iter_mut().zip(y) {
        *a += b;
    }
}

/// [`scale_inplace`] on an explicit SIMD level.
pub fn scale_inplace_with(level: SimdLevel, x: &mut [f32], s: f32) {
    #[cfg(target_arch = "x86_64")]
    if use_avx2(level) {
        // SAFETY: AVX2 checked.
        unsafe { avx2::scale(x, s) };
        return;
    }
    let _ = level;
    for a in x.iter_mut() {
        *a *= s;
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn add(x: &mut [f32], y: &[f32]) {
        let n = x.len();
        let mut i = 0;
        while i + 8 <= n {
            // SAFETY: i + 8 <= n = x.len() = y.len().
            unsafe {
                let p = x.as_mut_ptr().add(i);
                _mm256_storeu_ps(
                    p,
                    _mm256_add_ps(_mm256_loadu_ps(p), _mm256_loadu_ps(y.as_ptr().add(i))),
                );
            }
            i += 8;
        }
        for j in i..n {
            x[j] += y[j];
        }
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn scale(x: &mut [f32], s: f32) {
        let n = x.len();
        let sv = _mm256_set1_ps(s);
        let mut i = 0;
        while i + 8 <= n {
            // SAFETY: i + 8 <= n = x.len().
            unsafe {
                let p = x.as_mut_ptr().add(i);
                _mm256_storeu_ps(p, _mm256_mul_ps(_mm256_loadu_ps(p), sv));
            }
            i += 8;
        }
        for v in &mut x[i..] {
            *v *= s;
        }
    }
}
