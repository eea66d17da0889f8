//! int8 KV elements: each (token, kv head) row of `head_dim` values is stored as `i8` with one
//! f32 scale (absmax / 127, as llama.cpp's q8_0 but one scale per head row instead of per 32).
//! Reading is `q * scale`, exact in f32, so the AVX2 and scalar widenings give the same bits.

use super::KvElement;
use crate::cpu::SimdLevel;
use crate::ops::use_avx2;

/// Values past f16's range are clamped first, as the f16 arena does: a row with an infinity
/// still gets a finite scale, so it cannot turn a softmax into NaN.
const MAX: f32 = 65504.0;

/// Quantizes one row: `dst[i] = round(src[i] / scale)`, returns `scale = absmax / 127`
/// (0 for an all-zero row, which then reads back as zeros). NaN is stored as 0.
pub fn quantize_row(src: &[f32], dst: &mut [i8]) -> f32 {
    let amax = src.iter().fold(0.0f32, |m, &x| m.max(x.abs())).min(MAX);
    let scale = amax / 127.0;
    let inv = if scale > 0.0 { 1.0 / scale } else { 0.0 };
    for (d, &x) in dst.iter_mut().zip(src) {
        // `as` saturates and maps NaN to 0; the clamp keeps rounding from passing 127.
        *d = (x.clamp(-MAX, MAX) * inv).round().clamp(-127.0, 127.0) as i8;
    }
    scale
}

/// `dst[r * hd + i] = src[r * hd + i] * scales[r]`, `hd = src.len() / scales.len()`.
pub fn dequantize_rows(src: &[i8], scales: &[f32], dst: &mut [f32], avx2: bool) {
    #[cfg(target_arch = "x86_64")]
    if avx2 {
        // SAFETY: the caller checked AVX2 at run time.
        unsafe { avx2_dequantize_rows(src, scales, dst) };
        return;
    }
    let _ = avx2;
    let hd = src.len() / scales.len().max(1);
    for ((s, d), &scale) in src
        .chunks_exact(hd.max(1))
        .zip(dst.chunks_exact_mut(hd.max(1)))
        .zip(scales)
    {
        for (d, &q) in d.iter_mut().zip(s) {
            *d = f32::from(q) * scale;
        }
    }
}

/// [`dequantize_rows`], 8 values at a time (the same single rounding per value).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn avx2_dequantize_rows(src: &[i8], scales: &[f32], dst: &mut [f32]) {
    use std::arch::x86_64::*;
    let hd = src.len() / scales.len().max(1);
    for (r, &scale) in scales.iter().enumerate() {
        let (s, d) = (&src[r * hd..][..hd], &mut dst[r * hd..][..hd]);
        let sv = _mm256_set1_ps(scale);
        let mut i = 0;
        while i + 8 <= hd {
            // SAFETY: i + 8 <= hd, the length of both row slices.
            unsafe {
                let q = _mm_loadl_epi64(s.as_ptr().add(i).cast());
                let x = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q));
                _mm256_storeu_ps(d.as_mut_ptr().add(i), _mm256_mul_ps(x, sv));
            }
            i += 8;
        }
        for (d, &q) in d[i..].iter_mut().zip(&s[i..]) {
            *d = f32::from(q) * scale;
        }
    }
}

/// Scaled: `widen_rows` / `narrow_row` carry the per-row scales; the unscaled forms treat the
/// stored integers as the values (scale 1), which only tests and benches use.
impl KvElement for i8 {
    const SCALED: bool = true;

    fn simd(level: SimdLevel) -> bool {
        use_avx2(level)
    }

    fn as_f32(_: &[Self]) -> Option<&[f32]> {
        None
    }
    fn to_f32(src: &[Self], dst: &mut [f32]) {
        for (d, &q) in dst.iter_mut().zip(src) {
            *d = f32::from(q);
        }
    }
    fn from_f32(src: &[f32], dst: &mut [Self]) {
        for (d, &x) in dst.iter_mut().zip(src) {
            *d = x.round().clamp(-127.0, 127.0) as i8;
        }
    }
    fn widen_rows(src: &[Self], scales: &[f32], dst: &mut [f32], simd: bool) {
        dequantize_rows(src, scales, dst, simd);
    }
    fn narrow_row(src: &[f32], dst: &mut [Self], _simd: bool) -> f32 {
        quantize_row(src, dst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_round_trip_within_half_a_step() {
        let src: Vec<f32> = (0..64)
            .map(|i| ((i * 37) % 23) as f32 * 0.3 - 3.0)
            .collect();
        let mut q = vec![0i8; 64];
        let scale = quantize_row(&src, &mut q);
        let amax = src.iter().fold(0.0f32, |m, x| m.max(x.abs()));
        assert_eq!(scale, amax / 127.0);
        assert!(q.iter().any(|&x| x.abs() == 127), "absmax maps to 127");
        for avx2 in [false, crate::ops::use_avx2(crate::cpu::simd_level())] {
            let mut back = vec![0.0f32; 64];
            dequantize_rows(&q, &[scale], &mut back, avx2);
            for (i, (&x, &y)) in src.iter().zip(&back).enumerate() {
                assert!((x - y).abs() <= scale * 0.5 + 1e-6, "{i}: {x} read as {y}");
                assert_eq!(y, f32::from(q[i]) * scale, "{i}: exact q * scale");
            }
        }
    }

    #[test]
    fn zero_nan_and_infinite_rows_stay_finite() {
        let mut q = [5i8; 8];
        assert_eq!(quantize_row(&[0.0; 8], &mut q), 0.0);
        assert_eq!(q, [0; 8]);
        let row = [f32::NAN, f32::INFINITY, -1e9, 1.0, 0.0, 2.0, -3.0, 4.0];
        let scale = quantize_row(&row, &mut q);
        assert!(scale.is_finite() && scale > 0.0);
        assert_eq!(q[0], 0, "NaN stored as 0");
        assert_eq!((q[1], q[2]), (127, -127), "beyond f16's range clamped");
    }
}
