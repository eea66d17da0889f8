//! Whole-row scans for picking a token from a row of logits: the max, the sum of
//! `exp((x - shift) * scale)`, those exponentials themselves, and threshold search / counting.
//! NaN entries are ignored everywhere (never the max, never found, never counted, exp 0).

use super::use_avx2;
use crate::cpu::{SimdLevel, simd_level};

/// Largest non-NaN entry; -inf when there is none.
pub fn max_ignoring_nan(x: &[f32]) -> f32 {
    max_ignoring_nan_with(simd_level(), x)
}

/// Sum of `exp((x_i - shift) * scale)` in f64 (NaN entries and underflows add 0). The exp is
/// f32 and, on AVX2, within ~2e-7 relative of libm's.
pub fn exp_sum(x: &[f32], shift: f32, scale: f32) -> f64 {
    exp_sum_with(simd_level(), x, shift, scale)
}

/// `out_i = exp((x_i - shift) * scale)`, 0 for NaN entries; the same values [`exp_sum`] adds.
pub fn exp_into(x: &[f32], shift: f32, scale: f32, out: &mut [f32]) {
    exp_into_with(simd_level(), x, shift, scale, out);
}

/// Index of the first entry strictly above `threshold`.
pub fn find_greater(x: &[f32], threshold: f32) -> Option<usize> {
    find_greater_with(simd_level(), x, threshold)
}

/// How many entries are strictly above `threshold`.
pub fn count_greater(x: &[f32], threshold: f32) -> usize {
    count_greater_with(simd_level(), x, threshold)
}

/// How many entries equal `v` (none when `v` is NaN).
pub fn count_equal(x: &[f32], v: f32) -> usize {
    count_equal_with(simd_level(), x, v)
}

/// [`max_ignoring_nan`] on an explicit SIMD level.
pub fn max_ignoring_nan_with(level: SimdLevel, x: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if use_avx2(level) {
        // SAFETY: AVX2+FMA checked.
        return unsafe { avx2::max(x) };
    }
    let _ = level;
    x.iter().copied().fold(f32::NEG_INFINITY, f32::max)
}

/// [`exp_sum`] on an explicit SIMD level.
pub fn exp_sum_with(level: SimdLevel, x: &[f32], shift: f32, scale: f32) -> f64 {
    #[cfg(target_arch = "x86_64")]
    if use_avx2(level) {
        // SAFETY: AVX2+FMA checked.
        return unsafe { avx2::exp_sum(x, shift, scale) };
    }
    let _ = level;
    x.iter()
        .map(|&v| f64::from(scalar_exp(v, shift, scale)))
        .sum()
}

/// [`exp_into`] on an explicit SIMD level.
pub fn exp_into_with(level: SimdLevel, x: &[f32], shift: f32, scale: f32, out: &mut [f32]) {
    assert_eq!(x.len(), out.len(), "exp_into: length mismatch");
    #[cfg(target_arch = "x86_64")]
    if use_avx2(level) {
        // SAFETY: AVX2+FMA checked; lengths equal.
        unsafe { avx2::exp_into(x, shift, scale, out) };
        return;
    }
    let _ = level;
    for (o, &v) in out.iter_mut().zip(x) {
        *o = scalar_exp(v, shift, scale);
    }
}

/// [`find_greater`] on an explicit SIMD level.
pub fn find_greater_with(level: SimdLevel, x: &[f32], threshold: f32) -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    if use_avx2(level) {
        // SAFETY: AVX2+FMA checked.
        return unsafe { avx2::find_greater(x, threshold) };
    }
    let _ = level;
    x.iter().position(|&v| v > threshold)
}

/// [`count_greater`] on an explicit SIMD level.
pub fn count_greater_with(level: SimdLevel, x: &[f32], threshold: f32) -> usize {
    #[cfg(target_arch = "x86_64")]
    if use_avx2(level) {
        // SAFETY: AVX2+FMA checked.
        return unsafe { avx2::count::<{ std::arch::x86_64::_CMP_GT_OQ }>(x, threshold) };
    }
    let _ = level;
    x.iter().filter(|&&v| v > threshold).count()
}

/// [`count_equal`] on an explicit SIMD level.
pub fn count_equal_with(level: SimdLevel, x: &[f32], v: f32) -> usize {
    #[cfg(target_arch = "x86_64")]
    if use_avx2(level) {
        // SAFETY: AVX2+FMA checked.
        return unsafe { avx2::count::<{ std::arch::x86_64::_CMP_EQ_OQ }>(x, v) };
    }
    let _ = level;
    x.iter().filter(|&&e| e == v).count()
}

#[inline]
fn scalar_exp(v: f32, shift: f32, scale: f32) -> f32 {
    let d = (v - shift) * scale;
    if d.is_nan() { 0.0 } else { d.exp() }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::super::math::{exp256, hmax256, hsum256d, load_partial, store_partial};
    use std::arch::x86_64::*;

    /// `exp((x - shift) * scale)` on 8 lanes, NaN lanes 0.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn exp_lanes(x: __m256, shift: __m256, scale: __m256) -> __m256 {
        let d = _mm256_mul_ps(_mm256_sub_ps(x, shift), scale);
        let ordered = _mm256_cmp_ps::<_CMP_ORD_Q>(d, d);
        _mm256_and_ps(exp256(d), ordered)
    }

    /// Adds the 8 lanes of `e` to the two f64 accumulators.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn add_pd(acc: &mut [__m256d; 2], e: __m256) {
        acc[0] = _mm256_add_pd(acc[0], _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        acc[1] = _mm256_add_pd(acc[1], _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(e)));
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn max(x: &[f32]) -> f32 {
        let body = x.len() / 16 * 16;
        let mut m0 = _mm256_set1_ps(f32::NEG_INFINITY);
        let mut m1 = m0;
        let p = x.as_ptr();
        let mut i = 0;
        while i < body {
            // SAFETY: i + 16 <= body <= x.len(). MAXPS returns its second operand when either
            // is NaN, so the accumulator second keeps NaN lanes out.
            unsafe {
                m0 = _mm256_max_ps(_mm256_loadu_ps(p.add(i)), m0);
                m1 = _mm256_max_ps(_mm256_loadu_ps(p.add(i + 8)), m1);
            }
            i += 16;
        }
        let m = hmax256(_mm256_max_ps(m0, m1));
        x[body..].iter().copied().fold(m, f32::max)
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn exp_sum(x: &[f32], shift: f32, scale: f32) -> f64 {
        let n = x.len();
        let (sv, kv) = (_mm256_set1_ps(shift), _mm256_set1_ps(scale));
        // Two pairs of accumulators so consecutive adds do not wait on each other.
        let mut a = [_mm256_setzero_pd(); 2];
        let mut b = [_mm256_setzero_pd(); 2];
        let p = x.as_ptr();
        let mut i = 0;
        while i + 16 <= n {
            // SAFETY: i + 16 <= n.
            unsafe {
                add_pd(&mut a, exp_lanes(_mm256_loadu_ps(p.add(i)), sv, kv));
                add_pd(&mut b, exp_lanes(_mm256_loadu_ps(p.add(i + 8)), sv, kv));
            }
            i += 16;
        }
        if i + 8 <= n {
            // SAFETY: i + 8 <= n.
            add_pd(
                &mut a,
                exp_lanes(unsafe { _mm256_loadu_ps(p.add(i)) }, sv, kv),
            );
            i += 8;
        }
        if i < n {
            // SAFETY: n - i < 8 floats remain; the padding lanes are masked out.
            let e = exp_lanes(unsafe { load_partial(p.add(i), n - i) }, sv, kv);
            add_pd(&mut a, _mm256_and_ps(e, tail_mask(n - i)));
        }
        let s = _mm256_add_pd(_mm256_add_pd(a[0], a[1]), _mm256_add_pd(b[0], b[1]));
        hsum256d(s)
    }

    /// # Safety
    /// `out.len() == x.len()`.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn exp_into(x: &[f32], shift: f32, scale: f32, out: &mut [f32]) {
        let n = x.len();
        let (sv, kv) = (_mm256_set1_ps(shift), _mm256_set1_ps(scale));
        let (p, q) = (x.as_ptr(), out.as_mut_ptr());
        let mut i = 0;
        while i + 8 <= n {
            // SAFETY: i + 8 <= n = out.len().
            unsafe { _mm256_storeu_ps(q.add(i), exp_lanes(_mm256_loadu_ps(p.add(i)), sv, kv)) };
            i += 8;
        }
        if i < n {
            // SAFETY: n - i < 8 floats remain in both.
            unsafe {
                let e = exp_lanes(load_partial(p.add(i), n - i), sv, kv);
                store_partial(q.add(i), n - i, e);
            }
        }
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn find_greater(x: &[f32], threshold: f32) -> Option<usize> {
        let n = x.len();
        let t = _mm256_set1_ps(threshold);
        let p = x.as_ptr();
        let mut i = 0;
        while i + 16 <= n {
            // SAFETY: i + 16 <= n.
            let (a, b) = unsafe {
                (
                    _mm256_cmp_ps::<_CMP_GT_OQ>(_mm256_loadu_ps(p.add(i)), t),
                    _mm256_cmp_ps::<_CMP_GT_OQ>(_mm256_loadu_ps(p.add(i + 8)), t),
                )
            };
            let bits = (_mm256_movemask_ps(a) as u32) | ((_mm256_movemask_ps(b) as u32) << 8);
            if bits != 0 {
                return Some(i + bits.trailing_zeros() as usize);
            }
            i += 16;
        }
        x[i..].iter().position(|&v| v > threshold).map(|j| i + j)
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn count<const CMP: i32>(x: &[f32], v: f32) -> usize {
        let n = x.len();
        let t = _mm256_set1_ps(v);
        let p = x.as_ptr();
        // Each matching lane is all-ones = -1 as an i32: subtracting counts it. A lane holds at
        // most 2^31 / 8 rows' worth before wrapping, far beyond any vocabulary.
        let mut acc = _mm256_setzero_si256();
        let mut i = 0;
        while i + 8 <= n {
            // SAFETY: i + 8 <= n.
            let m = _mm256_cmp_ps::<CMP>(unsafe { _mm256_loadu_ps(p.add(i)) }, t);
            acc = _mm256_sub_epi32(acc, _mm256_castps_si256(m));
            i += 8;
        }
        let mut lanes = [0u32; 8];
        // SAFETY: lanes is 8 u32.
        unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast(), acc) };
        let tail = x[i..]
            .iter()
            .filter(|&&e| if CMP == _CMP_GT_OQ { e > v } else { e == v })
            .count();
        lanes.iter().map(|&c| c as usize).sum::<usize>() + tail
    }

    /// Lanes `0..r` all-ones, the rest zero.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn tail_mask(r: usize) -> __m256 {
        let idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(r as i32), idx))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::available_levels;

    /// A row with every awkward value: NaN, both infinities, ties, and lengths off the lane width.
    fn row(n: usize) -> Vec<f32> {
        (0..n)
            .map(|i| match i % 97 {
                5 => f32::NAN,
                11 => f32::NEG_INFINITY,
                40 => 6.5, // ties
                _ => ((i as f32) * 0.731).sin() * 6.0,
            })
            .collect()
    }

    #[test]
    fn every_level_matches_the_scalar_reference() {
        for n in [0usize, 1, 7, 8, 15, 16, 17, 100, 1000, 49_153] {
            let x = row(n);
            let levels = available_levels();
            for &level in &levels {
                assert_eq!(
                    max_ignoring_nan_with(level, &x),
                    max_ignoring_nan_with(SimdLevel::Scalar, &x),
                    "max n={n} {level:?}"
                );
                for t in [f32::NEG_INFINITY, 0.0, 5.9, 6.5, 100.0] {
                    assert_eq!(
                        find_greater_with(level, &x, t),
                        find_greater_with(SimdLevel::Scalar, &x, t)
                    );
                    assert_eq!(
                        count_greater_with(level, &x, t),
                        count_greater_with(SimdLevel::Scalar, &x, t)
                    );
                    assert_eq!(
                        count_equal_with(level, &x, t),
                        count_equal_with(SimdLevel::Scalar, &x, t)
                    );
                }
                for (shift, scale) in [(6.5f32, 1.0f32), (6.5, 1.0 / 0.7), (0.0, 0.2)] {
                    let want = exp_sum_with(SimdLevel::Scalar, &x, shift, scale);
                    let got = exp_sum_with(level, &x, shift, scale);
                    assert!((got - want).abs() <= want * 1e-6, "n={n}: {got} vs {want}");
                    let mut a = vec![1.0f32; n];
                    let mut b = vec![1.0f32; n];
                    exp_into_with(SimdLevel::Scalar, &x, shift, scale, &mut a);
                    exp_into_with(level, &x, shift, scale, &mut b);
                    for (i, (&u, &v)) in a.iter().zip(&b).enumerate() {
                        assert!((u - v).abs() <= u * 1e-6, "n={n} i={i}: {u} vs {v}");
                        // NaN and -inf entries give exactly 0.
                        if x[i].is_nan() || x[i] == f32::NEG_INFINITY {
                            assert_eq!(v, 0.0);
                        }
                    }
                    let summed: f64 = b.iter().map(|&v| f64::from(v)).sum();
                    assert!((summed - got).abs() <= got * 1e-9, "exp_into vs exp_sum");
                }
            }
        }
    }

    #[test]
    fn nan_is_ignored_and_empty_rows_have_no_max() {
        let x = [
            f32::NAN,
            1.0,
            f32::NAN,
            3.0,
            2.0,
            f32::NAN,
            0.0,
            0.0,
            f32::NAN,
        ];
        for level in available_levels() {
            assert_eq!(max_ignoring_nan_with(level, &x), 3.0);
            assert_eq!(max_ignoring_nan_with(level, &[]), f32::NEG_INFINITY);
            assert_eq!(
                max_ignoring_nan_with(level, &[f32::NAN; 20]),
                f32::NEG_INFINITY
            );
            assert_eq!(find_greater_with(level, &x, 2.5), Some(3));
            assert_eq!(find_greater_with(level, &x, f32::NEG_INFINITY), Some(1));
            assert_eq!(count_greater_with(level, &x, f32::NEG_INFINITY), 5);
            assert_eq!(count_equal_with(level, &x, f32::NAN), 0);
            assert_eq!(count_equal_with(level, &x, 0.0), 2);
        }
    }
}
