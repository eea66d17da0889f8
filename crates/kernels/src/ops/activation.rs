//! Gated FFN activations: `gate = act(gate) * up` with SiLU (SwiGLU, llama/qwen) or tanh-GELU
//! (GeGLU, gemma). Scalar forms are ggml's `ggml_silu_f32` and `ggml_gelu_f32`. The AVX2 GELU
//! uses the identity `0.5 x (1 + tanh u) = x * sigmoid(2u)`, which also avoids the cancellation
//! in `1 + tanh u` for negative inputs. (ggml's CPU build may instead read an f16 lookup table,
//! `GGML_GELU_FP16` in ggml-cpu/vec.h; we compute the formula in f32.)

use super::use_avx2;
use crate::cpu::{SimdLevel, simd_level};

const SQRT_2_OVER_PI: f32 = 0.797_884_6;
const GELU_COEF_A: f32 = 0.044_715;

/// `gate = silu(gate) * up`.
pub fn silu_mul(gate: &mut [f32], up: &[f32]) {
    silu_mul_with(simd_level(), gate, up);
}

/// `gate = gelu_tanh(gate) * up`.
pub fn gelu_tanh_mul(gate: &mut [f32], up: &[f32]) {
    gelu_tanh_mul_with(simd_level(), gate, up);
}

/// [`silu_mul`] on an explicit SIMD level.
pub fn silu_mul_with(level: SimdLevel, gate: &mut [f32], up: &[f32]) {
    assert_eq!(gate.len(), up.len(), "silu_mul: length mismatch");
    #[cfg(target_arch = "x86_64")]
    if use_avx2(level) {
        // SAFETY: AVX2+FMA checked; lengths equal.
        unsafe { avx2::gated::<false>(gate, up) };
        return;
    }
    let _ = level;
    for (g, &u) in gate.iter_mut().zip(up) {
        *g = silu(*g) * u;
    }
}

/// [`gelu_tanh_mul`] on an explicit SIMD level.
pub fn gelu_tanh_mul_with(level: SimdLevel, gate: &mut [f32], up: &[f32]) {
    assert_eq!(gate.len(), up.len(), "gelu_tanh_mul: length mismatch");
    #[cfg(target_arch = "x86_64")]
    if use_avx2(level) {
        // SAFETY: AVX2+FMA checked; lengths equal.
        unsafe { avx2::gated::<true>(gate, up) };
        return;
    }
    let _ = level;
    for (g, &u) in gate.iter_mut().zip(up) {
        *g = gelu_tanh(*g) * u;
    }
}

#[inline]
fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

#[inline]
fn gelu_tanh(x: f32) -> f32 {
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (1.0 + GELU_COEF_A * x * x)).tanh())
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::super::math::{exp256, load_partial, store_partial};
    use super::{GELU_COEF_A, SQRT_2_OVER_PI};
    use std::arch::x86_64::*;

    /// `x * sigmoid(t)` with `t = x` (SiLU) or `t = 2 sqrt(2/pi) (x + a x^3)` (tanh-GELU).
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn act<const GELU: bool>(x: __m256) -> __m256 {
        let neg_t = if GELU {
            let x2 = _mm256_mul_ps(x, x);
            let inner = _mm256_fmadd_ps(_mm256_set1_ps(GELU_COEF_A), x2, _mm256_set1_ps(1.0));
            _mm256_mul_ps(
                _mm256_mul_ps(x, inner),
                _mm256_set1_ps(-2.0 * SQRT_2_OVER_PI),
            )
        } else {
            _mm256_sub_ps(_mm256_setzero_ps(), x)
        };
        let one = _mm256_set1_ps(1.0);
        _mm256_div_ps(x, _mm256_add_ps(one, exp256(neg_t)))
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn gated<const GELU: bool>(gate: &mut [f32], up: &[f32]) {
        let n = gate.len();
        let mut i = 0;
        while i + 8 <= n {
            // SAFETY: i + 8 <= n = gate.len() = up.len().
            unsafe {
                let p = gate.as_mut_ptr().add(i);
                let y = _mm256_mul_ps(
                    act::<GELU>(_mm256_loadu_ps(p)),
                    _mm256_loadu_ps(up.as_ptr().add(i)),
                );
                _mm256_storeu_ps(p, y);
            }
            i += 8;
        }
        if i < n {
            let r = n - i;
            // SAFETY: r floats remain in both slices.
            unsafe {
                let p = gate.as_mut_ptr().add(i);
                let y = _mm256_mul_ps(
                    act::<GELU>(load_partial(p, r)),
                    load_partial(up.as_ptr().add(i), r),
                );
                store_partial(p, r, y);
            }
        }
    }
}
