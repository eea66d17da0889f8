//! AVX2 building blocks shared by the ops and attention kernels: a vectorised `exp` and
//! horizontal sums. Callers must have checked AVX2+FMA at run time (`ops::use_avx2`).

#[cfg(target_arch = "x86_64")]
pub(crate) use x86::*;

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// e^x on 8 lanes, max relative error ~2e-7 over the normal range (Cephes `expf`: Cody-Waite
    /// reduction by ln 2, degree-5 minimax polynomial, exponent built in the integer unit).
    /// Inputs below ln(FLT_MIN) give exactly 0 (so `exp(-inf) = 0`, no denormals); inputs above
    /// 127 ln 2 saturate at ~1.7e38 rather than overflowing to infinity.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    pub(crate) fn exp256(x: __m256) -> __m256 {
        const LOW: f32 = -87.336_55; // ln(FLT_MIN): 2^-126 keeps the built exponent normal
        const HIGH: f32 = 88.029_69; // 127 ln 2
        let underflow = _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_set1_ps(LOW));
        let x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(LOW)), _mm256_set1_ps(HIGH));
        let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm256_mul_ps(x, _mm256_set1_ps(std::f32::consts::LOG2_E)),
        );
        // r = x - n ln2, with ln2 split in a part exact in f32 and a correction.
        let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693_359_4), x);
        let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.121_944_4e-4), r);
        let mut p = _mm256_set1_ps(1.987_569_1e-4);
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.398_199_9e-3));
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.333_452e-3));
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.166_579_6e-2));
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.166_666_65));
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5));
        let r2 = _mm256_mul_ps(r, r);
        let y = _mm256_add_ps(_mm256_fmadd_ps(p, r2, r), _mm256_set1_ps(1.0));
        let e = _mm256_slli_epi32::<23>(_mm256_add_epi32(
            _mm256_cvtps_epi32(n),
            _mm256_set1_epi32(127),
        ));
        let y = _mm256_mul_ps(y, _mm256_castsi256_ps(e));
        _mm256_andnot_ps(underflow, y)
    }

    /// Sum of the 8 lanes.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    pub(crate) fn hsum256(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        _mm_cvtss_f32(s)
    }

    /// Max of the 8 lanes.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    pub(crate) fn hmax256(v: __m256) -> f32 {
        let s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_max_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_max_ss(s, _mm_movehdup_ps(s));
        _mm_cvtss_f32(s)
    }

    /// Sum of the 4 lanes.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    pub(crate) fn hsum256d(v: __m256d) -> f64 {
        let s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd::<1>(v));
        let s = _mm_add_sd(s, _mm_unpackhi_pd(s, s));
        _mm_cvtsd_f64(s)
    }

    /// Loads `n < 8` floats from `p` into the low lanes, zero elsewhere.
    ///
    /// # Safety
    /// `p..p+n` must be readable.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    pub(crate) unsafe fn load_partial(p: *const f32, n: usize) -> __m256 {
        debug_assert!(n < 8);
        let mut buf = [0.0f32; 8];
        // SAFETY: caller guarantees n readable floats at p; buf has room for 8.
        unsafe { std::ptr::copy_nonoverlapping(p, buf.as_mut_ptr(), n) };
        // SAFETY: buf is 8 floats.
        unsafe { _mm256_loadu_ps(buf.as_ptr()) }
    }

    /// Stores the low `n < 8` lanes of `v` to `p`.
    ///
    /// # Safety
    /// `p..p+n` must be writable.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    pub(crate) unsafe fn store_partial(p: *mut f32, n: usize, v: __m256) {
        debug_assert!(n < 8);
        let mut buf = [0.0f32; 8];
        // SAFETY: buf is 8 floats.
        unsafe { _mm256_storeu_ps(buf.as_mut_ptr(), v) };
        // SAFETY: caller guarantees n writable floats at p.
        unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr(), p, n) };
    }
}
