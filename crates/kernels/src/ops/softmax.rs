//! Numerically stable softmax over one row: subtract the max, exponentiate, normalise.
//! `-inf` entries (masked) become exactly 0.

use super::use_avx2;
use crate::cpu::{SimdLevel, simd_level};

/// `x = softmax(x)`.
pub fn softmax_inplace(x: &mut [f32]) {
    softmax_inplace_with(simd_level(), x);
}

/// [`softmax_inplace`] on an explicit SIMD level.
pub fn softmax_inplace_with(level: SimdLevel, x: &mut [f32]) {
    if x.is_empty() {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if use_avx2(level) {
        // SAFETY: AVX2+FMA checked.
        unsafe { avx2::softmax(x) };
        return;
    }
    let _ = level;
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0f64;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += f64::from(*v);
    }
    let inv = (1.0 / sum) as f32;
    for v in x.iter_mut() {
        *v *= inv;
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::super::math::{exp256, hmax256, hsum256d, load_partial, store_partial};
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn softmax(x: &mut [f32]) {
        let n = x.len();
        let body = n / 8 * 8;
        let mut mv = _mm256_set1_ps(f32::NEG_INFINITY);
        let mut i = 0;
        while i < body {
            // SAFETY: i + 8 <= body <= n.
            mv = _mm256_max_ps(mv, unsafe { _mm256_loadu_ps(x.as_ptr().add(i)) });
            i += 8;
        }
        let max = x[body..].iter().copied().fold(hmax256(mv), f32::max);
        let maxv = _mm256_set1_ps(max);
        // Sum in f64 lanes: a 256k-entry row of similar values loses digits in f32.
        let mut sum = _mm256_setzero_pd();
        let mut add = |e: __m256| {
            sum = _mm256_add_pd(sum, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
            sum = _mm256_add_pd(sum, _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(e)));
        };
        i = 0;
        while i < body {
            // SAFETY: i + 8 <= body <= n.
            unsafe {
                let p = x.as_mut_ptr().add(i);
                let e = exp256(_mm256_sub_ps(_mm256_loadu_ps(p), maxv));
                _mm256_storeu_ps(p, e);
                add(e);
            }
            i += 8;
        }
        if body < n {
            let r = n - body;
            // SAFETY: r floats remain; padding lanes are exp(-inf - max) = 0.
            unsafe {
                let p = x.as_mut_ptr().add(body);
                let e = exp256(_mm256_sub_ps(load_partial(p, r), maxv));
                let e = _mm256_blendv_ps(_mm256_setzero_ps(), e, tail_mask(r));
                store_partial(p, r, e);
                add(e);
            }
        }
        let inv = _mm256_set1_ps((1.0 / hsum256d(sum)) as f32);
        i = 0;
        while i < body {
            // SAFETY: i + 8 <= body <= n.
            unsafe {
                let p = x.as_mut_ptr().add(i);
                _mm256_storeu_ps(p, _mm256_mul_ps(_mm256_loadu_ps(p), inv));
            }
            i += 8;
        }
        let inv = _mm256_cvtss_f32(inv);
        for v in &mut x[body..] {
            *v *= inv;
        }
    }

    /// Lanes `0..r` all-ones, the rest zero.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn tail_mask(r: usize) -> __m256 {
        let idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(r as i32), idx))
    }
}
