//! The exact (erf) GELU in f32 for the encoders' up projections, fused with the bias add:
//! `x = 0.5 (x + b) (1 + erf((x + b) / sqrt 2))`. erf is the rational fit Eigen and XLA use for
//! f32 (`x P(x^2) / Q(x^2)` on [-4, 4], a few ulp), so it vectorizes to FMAs and one division
//! where the f64 `exp`-based erf of `encoder.rs` cost a quarter of a MiniLM request. Within 1e-6
//! of the f64 GELU (cancellation in `1 + erf` in the negative tail). The AVX2
//! and scalar forms perform the same IEEE operations in the same order: the same bits.

use super::use_avx2;
use crate::cpu::SimdLevel;

/// Numerator coefficients, x^13 down to x^1 (Eigen's `generic_fast_erf_float`).
#[allow(clippy::excessive_precision)]
const ALPHA: [f32; 7] = [
    -2.72614225801306e-10,
    2.77068142495902e-08,
    -2.10102402082508e-06,
    -5.69250639462346e-05,
    -7.34990630326855e-04,
    -2.95459980854025e-03,
    -1.60960333262415e-02,
];
/// Denominator coefficients, x^8 down to x^0.
#[allow(clippy::excessive_precision)]
const BETA: [f32; 5] = [
    -1.45660718464996e-05,
    -2.13374055278905e-04,
    -1.68282697438203e-03,
    -7.37332916720468e-03,
    -1.42647390514189e-02,
];
const FRAC_1_SQRT_2: f32 = std::f32::consts::FRAC_1_SQRT_2;

/// GELU of one value (the scalar twin of the AVX2 lanes).
#[inline]
fn gelu(v: f32) -> f32 {
    let z = (v * FRAC_1_SQRT_2).clamp(-4.0, 4.0);
    let z2 = z * z;
    let mut p = ALPHA[0];
    for a in &ALPHA[1..] {
        p = z2.mul_add(p, *a);
    }
    let mut q = BETA[0];
    for b in &BETA[1..] {
        q = z2.mul_add(q, *b);
    }
    let erf = z * p / q;
    0.5 * v * (1.0 + erf)
}

/// `x = gelu(x + bias)` per row of `bias.len()` values (`None`: no bias) on `level`.
pub fn bias_gelu_erf_rows_with(level: SimdLevel, x: &mut [f32], bias: Option<&[f32]>) {
    let d = bias.map_or(x.len(), <[f32]>::len).max(1);
    assert!(x.len().is_multiple_of(d), "bias_gelu_erf: rows of {d}");
    for row in x.chunks_exact_mut(d) {
        #[cfg(target_arch = "x86_64")]
        if use_avx2(level) {
            // SAFETY: AVX2+FMA checked; the bias (when given) is as long as the row.
            unsafe { avx2(row, bias) };
            continue;
        }
        let _ = level;
        for (i, v) in row.iter_mut().enumerate() {
            *v = gelu(*v + bias.map_or(0.0, |b| b[i]));
        }
    }
}

/// # Safety
/// AVX2+FMA; `bias`, when given, holds at least `row.len()` values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn avx2(row: &mut [f32], bias: Option<&[f32]>) {
    use std::arch::x86_64::*;
    let n8 = row.len() / 8 * 8;
    let (lo, hi) = (_mm256_set1_ps(-4.0), _mm256_set1_ps(4.0));
    let (half, one) = (_mm256_set1_ps(0.5), _mm256_set1_ps(1.0));
    let s = _mm256_set1_ps(FRAC_1_SQRT_2);
    for i in (0..n8).step_by(8) {
        // SAFETY: i + 8 <= row.len() (and the bias's length, by the contract).
        unsafe {
            let mut v = _mm256_loadu_ps(row.as_ptr().add(i));
            if let Some(b) = bias {
                v = _mm256_add_ps(v, _mm256_loadu_ps(b.as_ptr().add(i)));
            }
            // max then min, as `clamp` (no NaN reaches an encoder's activations).
            let z = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(v, s), lo), hi);
            let z2 = _mm256_mul_ps(z, z);
            let mut p = _mm256_set1_ps(ALPHA[0]);
            for a in &ALPHA[1..] {
                p = _mm256_fmadd_ps(z2, p, _mm256_set1_ps(*a));
            }
            let mut q = _mm256_set1_ps(BETA[0]);
            for b in &BETA[1..] {
                q = _mm256_fmadd_ps(z2, q, _mm256_set1_ps(*b));
            }
            let erf = _mm256_div_ps(_mm256_mul_ps(z, p), q);
            let g = _mm256_mul_ps(_mm256_mul_ps(half, v), _mm256_add_ps(one, erf));
            _mm256_storeu_ps(row.as_mut_ptr().add(i), g);
        }
    }
    for i in n8..row.len() {
        row[i] = gelu(row[i] + bias.map_or(0.0, |b| b[i]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::available_levels;

    /// Within 1e-6 of the f64 GELU (the erf fit's ~1e-7 error, times |x| / 2 in the negative
    /// tail where `1 + erf` cancels), and the same bits on every level.
    #[test]
    fn gelu_erf_f32_matches_f64_and_levels_agree() {
        let x0: Vec<f32> = (0..4003).map(|i| (i as f32 - 2001.0) * 0.005).collect();
        let mut want = x0.clone();
        super::super::gelu_erf_inplace(&mut want);
        let mut first: Option<Vec<f32>> = None;
        for level in available_levels() {
            let mut got = x0.clone();
            bias_gelu_erf_rows_with(level, &mut got, None);
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                let tol = 1e-6 + 3e-7 * w.abs();
                assert!((g - w).abs() <= tol, "{level:?} x = {}: {g} vs {w}", x0[i]);
            }
            match &first {
                None => first = Some(got),
                Some(f) => assert_eq!(&got, f, "{level:?} differs from scalar"),
            }
        }
    }
}
