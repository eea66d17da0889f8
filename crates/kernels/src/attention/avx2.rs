//! AVX2 inner loops of paged attention: the online-softmax update of one row, or of the query
//! rows of a GQA group together, over a run of keys, and the F16C widening of f16 KV tiles.

use crate::ops::math::{exp256, hmax256, hsum256, load_partial};
use std::arch::x86_64::*;

/// AVX2 form of `scalar_update_row`; `q_row.len() % 8 == 0`.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn update_row(
    q_row: &[f32],
    k_rows: &[f32],
    v_rows: &[f32],
    scale: f32,
    scores: &mut [f32],
    max: &mut f32,
    sum: &mut f32,
    acc: &mut [f32],
) {
    let hd = q_row.len();
    let n = scores.len();
    debug_assert!(
        hd.is_multiple_of(8) && k_rows.len() == n * hd && v_rows.len() == n * hd && acc.len() == hd
    );
    // SAFETY (all blocks below): every pointer offset stays inside the slices whose
    // lengths are asserted above: key/value k is at k*hd..(k+1)*hd, lanes step by 8 < hd.
    let q = q_row.as_ptr();
    let kp = k_rows.as_ptr();
    let mut k = 0;
    // Eight keys at a time keep eight independent FMA chains in flight; each group of four is
    // reduced exactly as the four-key loop below reduces it, so a score's bits do not depend
    // on which loop computed it.
    while k + 8 <= n {
        let mut a = [_mm256_setzero_ps(); 8];
        let mut d = 0;
        while d < hd {
            unsafe {
                let qv = _mm256_loadu_ps(q.add(d));
                for (j, a) in a.iter_mut().enumerate() {
                    *a = _mm256_fmadd_ps(qv, _mm256_loadu_ps(kp.add((k + j) * hd + d)), *a);
                }
            }
            d += 8;
        }
        let scale4 = _mm_set1_ps(scale);
        for (half, a) in a.chunks_exact(4).enumerate() {
            let s4 = reduce4(a[0], a[1], a[2], a[3]);
            // SAFETY: k + 8 <= n = scores.len().
            unsafe {
                _mm_storeu_ps(
                    scores.as_mut_ptr().add(k + 4 * half),
                    _mm_mul_ps(s4, scale4),
                )
            };
        }
        k += 8;
    }
    while k + 4 <= n {
        let (mut a0, mut a1, mut a2, mut a3) = (
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
        );
        let mut d = 0;
        while d < hd {
            unsafe {
                let qv = _mm256_loadu_ps(q.add(d));
                a0 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(kp.add(k * hd + d)), a0);
                a1 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(kp.add((k + 1) * hd + d)), a1);
                a2 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(kp.add((k + 2) * hd + d)), a2);
                a3 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(kp.add((k + 3) * hd + d)), a3);
            }
            d += 8;
        }
        let s4 = reduce4(a0, a1, a2, a3);
        // SAFETY: k + 4 <= n = scores.len().
        unsafe {
            _mm_storeu_ps(
                scores.as_mut_ptr().add(k),
                _mm_mul_ps(s4, _mm_set1_ps(scale)),
            )
        };
        k += 4;
    }
    while k < n {
        let mut a = _mm256_setzero_ps();
        let mut d = 0;
        while d < hd {
            unsafe {
                a = _mm256_fmadd_ps(
                    _mm256_loadu_ps(q.add(d)),
                    _mm256_loadu_ps(kp.add(k * hd + d)),
                    a,
                )
            };
            d += 8;
        }
        scores[k] = hsum256(a) * scale;
        k += 1;
    }

    let alpha = softmax_block(scores, max, sum);

    // acc = acc * alpha + sum_k p_k v_k, keys outer and up to 8 strips of 8 lanes live at once,
    // so the FMA latency is hidden behind independent strips. Per lane the FMAs run in the same
    // order as one strip at a time would (alpha first, then keys in order): same bits.
    let av = _mm256_set1_ps(alpha);
    let (ap, vp) = (acc.as_mut_ptr(), v_rows.as_ptr());
    let mut d = 0;
    // SAFETY: each call touches lanes d..d + 8 * S < hd of acc and of every value row.
    unsafe {
        while d + 64 <= hd {
            accumulate_strips::<8>(ap.add(d), vp.add(d), hd, scores, av);
            d += 64;
        }
        while d + 32 <= hd {
            accumulate_strips::<4>(ap.add(d), vp.add(d), hd, scores, av);
            d += 32;
        }
        while d < hd {
            accumulate_strips::<1>(ap.add(d), vp.add(d), hd, scores, av);
            d += 8;
        }
    }
}

/// Block max, rescale factor `alpha = exp(max_old - max_new)` (returned), scores replaced by
/// `exp(s - max_new)`, and `sum = sum * alpha + sum(exp)`; `max` becomes the new max.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn softmax_block(scores: &mut [f32], max: &mut f32, sum: &mut f32) -> f32 {
    let n = scores.len();
    let mut mv = _mm256_set1_ps(*max);
    let body = n / 8 * 8;
    let mut i = 0;
    // SAFETY (all blocks): i + 8 <= body <= n = scores.len(); the tail reads n - body < 8 floats.
    while i < body {
        mv = _mm256_max_ps(mv, unsafe { _mm256_loadu_ps(scores.as_ptr().add(i)) });
        i += 8;
    }
    let m_new = scores[body..].iter().copied().fold(hmax256(mv), f32::max);
    let mvec = _mm256_set1_ps(m_new);
    let alpha = _mm256_cvtss_f32(exp256(_mm256_set1_ps(*max - m_new)));
    let mut sv = _mm256_setzero_ps();
    i = 0;
    while i < body {
        unsafe {
            let p = scores.as_mut_ptr().add(i);
            let e = exp256(_mm256_sub_ps(_mm256_loadu_ps(p), mvec));
            _mm256_storeu_ps(p, e);
            sv = _mm256_add_ps(sv, e);
        }
        i += 8;
    }
    let mut block_sum = hsum256(sv);
    if body < n {
        let e = exp256(_mm256_sub_ps(
            unsafe { load_partial(scores.as_ptr().add(body), n - body) },
            mvec,
        ));
        let mut tmp = [0.0f32; 8];
        unsafe { _mm256_storeu_ps(tmp.as_mut_ptr(), e) };
        for (sc, &t) in scores[body..].iter_mut().zip(&tmp) {
            *sc = t;
            block_sum += t;
        }
    }
    *sum = *sum * alpha + block_sum;
    *max = m_new;
    alpha
}

/// [`update_row`] for the query rows of one GQA group at one position, which all fold the same
/// keys: `q_rows` and `acc` are `rows x hd`, `scores` is `rows x n`, `max`/`sum` one per row
/// (`rows = max.len()`, `hd % 8 == 0`). Rows go in blocks of 2 or 3 so each K and V vector is
/// loaded once per block instead of once per row (the single-row kernel is load-bound).
/// Every row's result is bit for bit what [`update_row`] gives on that row alone: a score is
/// the same 8-lane FMA chain over `d` ascending, reduced by `reduce4` for keys in the whole
/// fours from the start and by `hsum256` for the last `n % 4` (as `update_row`'s 8-, 4- and
/// 1-key loops do), and each acc lane is `acc * alpha` then one FMA per key in order.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn update_rows(
    q_rows: &[f32],
    k_rows: &[f32],
    v_rows: &[f32],
    scale: f32,
    scores: &mut [f32],
    max: &mut [f32],
    sum: &mut [f32],
    acc: &mut [f32],
) {
    let rows = max.len();
    if rows == 0 || scores.is_empty() {
        return; // no rows, or no keys to fold
    }
    let (hd, n) = (acc.len() / rows, scores.len() / rows);
    debug_assert!(
        hd.is_multiple_of(8)
            && sum.len() == rows
            && q_rows.len() == rows * hd
            && acc.len() == rows * hd
            && scores.len() == rows * n
            && k_rows.len() == n * hd
            && v_rows.len() == n * hd
    );
    let mut r = 0;
    while r < rows {
        // Blocks of 3 rows fill the 16 ymm registers; 4 rows go as 2 + 2, never 3 + 1.
        let take = match rows - r {
            1 => 1,
            2 | 4 => 2,
            _ => 3,
        };
        let (q, a) = (
            &q_rows[r * hd..][..take * hd],
            &mut acc[r * hd..][..take * hd],
        );
        let s = &mut scores[r * n..][..take * n];
        let (m, l) = (&mut max[r..r + take], &mut sum[r..r + take]);
        // SAFETY: AVX2+FMA per this function's contract; every block's slices have the lengths
        // its kernel expects (checked above for the whole group).
        unsafe {
            match take {
                1 => update_row(q, k_rows, v_rows, scale, s, &mut m[0], &mut l[0], a),
                2 => update_block::<2>(q, k_rows, v_rows, scale, s, m, l, a),
                _ => update_block::<3>(q, k_rows, v_rows, scale, s, m, l, a),
            }
        }
        r += take;
    }
}

/// [`update_rows`] for exactly `R` rows, everything register-blocked over the rows.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn update_block<const R: usize>(
    q_rows: &[f32],
    k_rows: &[f32],
    v_rows: &[f32],
    scale: f32,
    scores: &mut [f32],
    max: &mut [f32],
    sum: &mut [f32],
    acc: &mut [f32],
) {
    let hd = q_rows.len() / R;
    let n = scores.len() / R;
    debug_assert!(
        max.len() == R
            && sum.len() == R
            && acc.len() == R * hd
            && k_rows.len() == n * hd
            && v_rows.len() == n * hd
    );
    let (q, kp, sp) = (q_rows.as_ptr(), k_rows.as_ptr(), scores.as_mut_ptr());
    // SAFETY (all blocks below): row r's q/acc lanes are r*hd + d, d + 8 <= hd; key k's lanes
    // are k*hd + d with k < n; row r's scores are r*n + k with k < n (lengths asserted above).
    let mut k = 0;
    // R rows x 4 keys of accumulators; each K vector is loaded once for the R rows.
    while k + 4 <= n {
        let mut a = [[_mm256_setzero_ps(); 4]; R];
        let mut d = 0;
        while d < hd {
            unsafe {
                let mut qv = [_mm256_setzero_ps(); R];
                for (r, qv) in qv.iter_mut().enumerate() {
                    *qv = _mm256_loadu_ps(q.add(r * hd + d));
                }
                for j in 0..4 {
                    let kv = _mm256_loadu_ps(kp.add((k + j) * hd + d));
                    for (a, qv) in a.iter_mut().zip(&qv) {
                        a[j] = _mm256_fmadd_ps(*qv, kv, a[j]);
                    }
                }
            }
            d += 8;
        }
        let scale4 = _mm_set1_ps(scale);
        for (r, a) in a.iter().enumerate() {
            let s4 = reduce4(a[0], a[1], a[2], a[3]);
            unsafe { _mm_storeu_ps(sp.add(r * n + k), _mm_mul_ps(s4, scale4)) };
        }
        k += 4;
    }
    while k < n {
        let mut a = [_mm256_setzero_ps(); R];
        let mut d = 0;
        while d < hd {
            unsafe {
                let kv = _mm256_loadu_ps(kp.add(k * hd + d));
                for (r, a) in a.iter_mut().enumerate() {
                    *a = _mm256_fmadd_ps(_mm256_loadu_ps(q.add(r * hd + d)), kv, *a);
                }
            }
            d += 8;
        }
        for (r, a) in a.iter().enumerate() {
            unsafe { *sp.add(r * n + k) = hsum256(*a) * scale };
        }
        k += 1;
    }

    let mut alpha = [_mm256_setzero_ps(); R];
    for (r, (al, s)) in alpha.iter_mut().zip(scores.chunks_exact_mut(n)).enumerate() {
        *al = _mm256_set1_ps(softmax_block(s, &mut max[r], &mut sum[r]));
    }

    // acc rows = acc * alpha + sum_k p_k v_k with R rows x S strips live: each V vector is
    // loaded once for the R rows. R = 3, S = 4 takes all 16 ymm registers (12 accumulators,
    // 3 broadcast weights, 1 value vector); six strips for R = 2 measured no better.
    let (ap, vp, sp) = (acc.as_mut_ptr(), v_rows.as_ptr(), scores.as_ptr());
    let mut d = 0;
    // SAFETY: each call touches lanes d..d + 8 * S <= hd of every acc row and value row.
    unsafe {
        while d + 32 <= hd {
            accumulate_block::<R, 4>(ap.add(d), vp.add(d), hd, sp, n, &alpha);
            d += 32;
        }
        while d < hd {
            accumulate_block::<R, 1>(ap.add(d), vp.add(d), hd, sp, n, &alpha);
            d += 8;
        }
    }
}

/// For each row `r < R`: `acc[r * hd..][..8S] = acc * alpha[r] + sum_k w[r * n + k] *
/// v[k * hd..][..8S]`, all `R x S` strips in registers, keys in order.
///
/// # Safety
/// `acc + r * hd..+ 8S` must be writable for `r < R`, `v + k * hd..+ 8S` readable and
/// `w + r * n + k` readable for every `k < n`.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn accumulate_block<const R: usize, const S: usize>(
    acc: *mut f32,
    v: *const f32,
    hd: usize,
    w: *const f32,
    n: usize,
    alpha: &[__m256; R],
) {
    let mut a = [[_mm256_setzero_ps(); S]; R];
    // SAFETY (all blocks): offsets as in the contract.
    for (r, (a, al)) in a.iter_mut().zip(alpha).enumerate() {
        for (j, a) in a.iter_mut().enumerate() {
            *a = _mm256_mul_ps(unsafe { _mm256_loadu_ps(acc.add(r * hd + 8 * j)) }, *al);
        }
    }
    for k in 0..n {
        let mut wv = [_mm256_setzero_ps(); R];
        for (r, wv) in wv.iter_mut().enumerate() {
            *wv = _mm256_set1_ps(unsafe { *w.add(r * n + k) });
        }
        let row = unsafe { v.add(k * hd) };
        for j in 0..S {
            let vv = unsafe { _mm256_loadu_ps(row.add(8 * j)) };
            for (a, wv) in a.iter_mut().zip(&wv) {
                a[j] = _mm256_fmadd_ps(*wv, vv, a[j]);
            }
        }
    }
    for (r, a) in a.iter().enumerate() {
        for (j, a) in a.iter().enumerate() {
            unsafe { _mm256_storeu_ps(acc.add(r * hd + 8 * j), *a) };
        }
    }
}

/// `acc[0..8S] = acc * alpha + sum_k scores[k] * v[k * hd..][..8S]` with `S` strips in registers.
///
/// # Safety
/// `acc..acc + 8S` must be writable and `v + k * hd..+ 8S` readable for every `k < scores.len()`.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn accumulate_strips<const S: usize>(
    acc: *mut f32,
    v: *const f32,
    hd: usize,
    scores: &[f32],
    alpha: __m256,
) {
    let mut a = [_mm256_setzero_ps(); S];
    // SAFETY (all blocks): offsets 8j < 8S and k * hd with k < scores.len(), per the contract.
    for (j, a) in a.iter_mut().enumerate() {
        *a = _mm256_mul_ps(unsafe { _mm256_loadu_ps(acc.add(8 * j)) }, alpha);
    }
    for (k, &w) in scores.iter().enumerate() {
        let wv = _mm256_set1_ps(w);
        let row = unsafe { v.add(k * hd) };
        for (j, a) in a.iter_mut().enumerate() {
            *a = _mm256_fmadd_ps(wv, unsafe { _mm256_loadu_ps(row.add(8 * j)) }, *a);
        }
    }
    for (j, a) in a.iter().enumerate() {
        unsafe { _mm256_storeu_ps(acc.add(8 * j), *a) };
    }
}

/// Transpose-reduces four accumulators into one vector of their four lane sums.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn reduce4(a0: __m256, a1: __m256, a2: __m256, a3: __m256) -> __m128 {
    let s01 = _mm256_hadd_ps(a0, a1);
    let s23 = _mm256_hadd_ps(a2, a3);
    let s = _mm256_hadd_ps(s01, s23);
    _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps::<1>(s))
}

/// Hints that `bytes` from `p` will be read soon (into L1); never faults, changes no result.
#[inline]
pub(super) fn prefetch(p: *const i8, bytes: usize) {
    let mut off = 0;
    while off < bytes {
        // SAFETY: SSE is part of the x86-64 baseline; a prefetch never faults, whatever the address.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(off)) };
        off += 64;
    }
}

/// `dst[i] = src[i]`, f16 bit patterns widened to f32 (exact) 8 at a time.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn f16_to_f32(src: &[u16], dst: &mut [f32]) {
    let n = src.len().min(dst.len());
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: i + 8 <= n, the length of both slices.
        unsafe {
            let h = _mm_loadu_si128(src.as_ptr().add(i).cast());
            _mm256_storeu_ps(dst.as_mut_ptr().add(i), _mm256_cvtph_ps(h));
        }
        i += 8;
    }
    for (d, &h) in dst[i..n].iter_mut().zip(&src[i..n]) {
        *d = half::f16::from_bits(h).to_f32();
    }
}

/// `dst[i] = src[i]` as f16 bits, rounded to nearest even after clamping to f16's largest
/// finite value (`KvElement::from_f32` for f16, 8 values at a time). NaN stays NaN: `max` and
/// `min` return their second operand when one is NaN, so the clamp passes it through.
#[target_feature(enable = "avx2,f16c")]
pub(super) unsafe fn f32_to_f16_saturating(src: &[f32], dst: &mut [u16]) {
    const MAX: f32 = 65504.0;
    let n = src.len().min(dst.len());
    let (lo, hi) = (_mm256_set1_ps(-MAX), _mm256_set1_ps(MAX));
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: i + 8 <= n, the length of both slices.
        unsafe {
            let x = _mm256_loadu_ps(src.as_ptr().add(i));
            let c = _mm256_min_ps(hi, _mm256_max_ps(lo, x));
            let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(c);
            _mm_storeu_si128(dst.as_mut_ptr().add(i).cast(), h);
        }
        i += 8;
    }
    for (d, &x) in dst[i..n].iter_mut().zip(&src[i..n]) {
        *d = half::f16::from_f32(x.clamp(-MAX, MAX)).to_bits();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests may unwrap
    use super::*;
    use crate::ops::math::{exp256, hmax256, hsum256, load_partial};
    use rand::rngs::StdRng;
    use rand::{RngExt, SeedableRng};

    /// Signature shared by the two kernels under comparison.
    type UpdateRow =
        unsafe fn(&[f32], &[f32], &[f32], f32, &mut [f32], &mut f32, &mut f32, &mut [f32]);

    /// The kernel as it was before the strips were interleaved (one strip of acc at a time,
    /// four keys per QK step), kept verbatim as the bit-exact reference.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn update_row_one_strip_at_a_time(
        q_row: &[f32],
        k_rows: &[f32],
        v_rows: &[f32],
        scale: f32,
        scores: &mut [f32],
        max: &mut f32,
        sum: &mut f32,
        acc: &mut [f32],
    ) {
        let hd = q_row.len();
        let n = scores.len();
        debug_assert!(
            hd.is_multiple_of(8)
                && k_rows.len() == n * hd
                && v_rows.len() == n * hd
                && acc.len() == hd
        );
        // SAFETY (all blocks below): every pointer offset stays inside the slices whose
        // lengths are asserted above: key/value k is at k*hd..(k+1)*hd, lanes step by 8 < hd.
        let q = q_row.as_ptr();
        let kp = k_rows.as_ptr();
        let mut k = 0;
        while k + 4 <= n {
            let (mut a0, mut a1, mut a2, mut a3) = (
                _mm256_setzero_ps(),
                _mm256_setzero_ps(),
                _mm256_setzero_ps(),
                _mm256_setzero_ps(),
            );
            let mut d = 0;
            while d < hd {
                unsafe {
                    let qv = _mm256_loadu_ps(q.add(d));
                    a0 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(kp.add(k * hd + d)), a0);
                    a1 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(kp.add((k + 1) * hd + d)), a1);
                    a2 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(kp.add((k + 2) * hd + d)), a2);
                    a3 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(kp.add((k + 3) * hd + d)), a3);
                }
                d += 8;
            }
            // Transpose-reduce the four accumulators into one vector of four dot products.
            let s01 = _mm256_hadd_ps(a0, a1);
            let s23 = _mm256_hadd_ps(a2, a3);
            let s = _mm256_hadd_ps(s01, s23);
            let s4 = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps::<1>(s));
            // SAFETY: k + 4 <= n = scores.len().
            unsafe {
                _mm_storeu_ps(
                    scores.as_mut_ptr().add(k),
                    _mm_mul_ps(s4, _mm_set1_ps(scale)),
                )
            };
            k += 4;
        }
        while k < n {
            let mut a = _mm256_setzero_ps();
            let mut d = 0;
            while d < hd {
                unsafe {
                    a = _mm256_fmadd_ps(
                        _mm256_loadu_ps(q.add(d)),
                        _mm256_loadu_ps(kp.add(k * hd + d)),
                        a,
                    )
                };
                d += 8;
            }
            scores[k] = hsum256(a) * scale;
            k += 1;
        }

        // Block max, rescale factor, exponentiated scores and their sum.
        let mut mv = _mm256_set1_ps(*max);
        let body = n / 8 * 8;
        let mut i = 0;
        while i < body {
            mv = _mm256_max_ps(mv, unsafe { _mm256_loadu_ps(scores.as_ptr().add(i)) });
            i += 8;
        }
        let m_new = scores[body..].iter().copied().fold(hmax256(mv), f32::max);
        let mvec = _mm256_set1_ps(m_new);
        let alpha = _mm256_cvtss_f32(exp256(_mm256_set1_ps(*max - m_new)));
        let mut sv = _mm256_setzero_ps();
        i = 0;
        while i < body {
            unsafe {
                let p = scores.as_mut_ptr().add(i);
                let e = exp256(_mm256_sub_ps(_mm256_loadu_ps(p), mvec));
                _mm256_storeu_ps(p, e);
                sv = _mm256_add_ps(sv, e);
            }
            i += 8;
        }
        let mut block_sum = hsum256(sv);
        if body < n {
            let e = exp256(_mm256_sub_ps(
                unsafe { load_partial(scores.as_ptr().add(body), n - body) },
                mvec,
            ));
            let mut tmp = [0.0f32; 8];
            unsafe { _mm256_storeu_ps(tmp.as_mut_ptr(), e) };
            for (sc, &t) in scores[body..].iter_mut().zip(&tmp) {
                *sc = t;
                block_sum += t;
            }
        }
        *sum = *sum * alpha + block_sum;
        *max = m_new;

        // acc = acc * alpha + sum_k p_k v_k, one 8-lane strip of acc at a time (kept in a register).
        let av = _mm256_set1_ps(alpha);
        let vp = v_rows.as_ptr();
        let mut d = 0;
        while d < hd {
            unsafe {
                let pa = acc.as_mut_ptr().add(d);
                let mut a = _mm256_mul_ps(_mm256_loadu_ps(pa), av);
                for (k, &w) in scores.iter().enumerate() {
                    a = _mm256_fmadd_ps(_mm256_set1_ps(w), _mm256_loadu_ps(vp.add(k * hd + d)), a);
                }
                _mm256_storeu_ps(pa, a);
            }
            d += 8;
        }
    }

    /// Interleaving strips and keys must not change a single bit: every lane sees the same FMAs
    /// in the same order. Random running states (including the empty one), 1..=16 keys.
    #[test]
    fn update_row_matches_one_strip_at_a_time_bit_for_bit() {
        if !(is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")) {
            return;
        }
        let mut rng = StdRng::seed_from_u64(5);
        let mut vec = |n: usize, amp: f32| -> Vec<f32> {
            (0..n).map(|_| rng.random_range(-amp..amp)).collect()
        };
        for hd in [8, 24, 40, 64, 96, 128, 256] {
            for n in 1..=16 {
                for trial in 0..4 {
                    let (q, k, v) = (vec(hd, 3.0), vec(n * hd, 1.0), vec(n * hd, 1.0));
                    let acc0 = vec(hd, 2.0);
                    let (max0, sum0) = match trial {
                        0 => (f32::NEG_INFINITY, 0.0),
                        _ => (vec(1, 4.0)[0], 1.0 + vec(1, 1.0)[0].abs()),
                    };
                    let scale = 1.0 / (hd as f32).sqrt();
                    let run = |f: UpdateRow| {
                        let (mut scores, mut acc) = (vec![0.0; n], acc0.clone());
                        let (mut max, mut sum) = (max0, sum0);
                        // SAFETY: AVX2+FMA checked above; lengths as the kernels require.
                        unsafe { f(&q, &k, &v, scale, &mut scores, &mut max, &mut sum, &mut acc) };
                        (scores, max, sum, acc)
                    };
                    let (want, got) = (run(update_row_one_strip_at_a_time), run(update_row));
                    let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                    let what = format!("hd {hd} n {n} trial {trial}");
                    assert_eq!(bits(&got.0), bits(&want.0), "{what}: scores");
                    assert_eq!(got.1.to_bits(), want.1.to_bits(), "{what}: max");
                    assert_eq!(got.2.to_bits(), want.2.to_bits(), "{what}: sum");
                    assert_eq!(bits(&got.3), bits(&want.3), "{what}: acc");
                }
            }
        }
    }

    /// Folding a group's rows together gives every row the bits `update_row` gives it alone:
    /// group sizes 1..=8 (blocks of 1, 2, 3 and their mixes), head dims with and without a
    /// 32-lane strip tail, 1..=16 keys, rows with empty (max = -inf) and finite prior states.
    #[test]
    fn update_rows_matches_update_row_per_row_bit_for_bit() {
        if !(is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")) {
            return;
        }
        let mut rng = StdRng::seed_from_u64(6);
        let mut vec = |n: usize, amp: f32| -> Vec<f32> {
            (0..n).map(|_| rng.random_range(-amp..amp)).collect()
        };
        let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        for hd in [8, 40, 64, 128, 256] {
            for group in 1..=8 {
                for n in 1..=16 {
                    for trial in 0..3 {
                        let (q, k, v) = (vec(group * hd, 3.0), vec(n * hd, 1.0), vec(n * hd, 1.0));
                        let acc0 = vec(group * hd, 2.0);
                        let prior = vec(2 * group, 4.0);
                        // Trial 0: all rows empty; 1: all finite; 2: alternating.
                        let (max0, sum0): (Vec<f32>, Vec<f32>) = (0..group)
                            .map(|r| match (trial, r % 2) {
                                (0, _) | (2, 0) => (f32::NEG_INFINITY, 0.0),
                                _ => (prior[2 * r], 1.0 + prior[2 * r + 1].abs()),
                            })
                            .unzip();
                        let scale = 1.0 / (hd as f32).sqrt();
                        let (mut scores, mut acc) = (vec![0.0; group * n], acc0.clone());
                        let (mut max, mut sum) = (max0.clone(), sum0.clone());
                        // SAFETY: AVX2+FMA checked above; lengths as the kernel requires.
                        unsafe {
                            update_rows(
                                &q,
                                &k,
                                &v,
                                scale,
                                &mut scores,
                                &mut max,
                                &mut sum,
                                &mut acc,
                            )
                        };
                        for r in 0..group {
                            let (mut s1, mut a1) = (vec![0.0; n], acc0[r * hd..][..hd].to_vec());
                            let (mut m1, mut l1) = (max0[r], sum0[r]);
                            // SAFETY: as above.
                            unsafe {
                                update_row(
                                    &q[r * hd..][..hd],
                                    &k,
                                    &v,
                                    scale,
                                    &mut s1,
                                    &mut m1,
                                    &mut l1,
                                    &mut a1,
                                )
                            };
                            let what = format!("hd {hd} group {group} n {n} trial {trial} row {r}");
                            assert_eq!(bits(&scores[r * n..][..n]), bits(&s1), "{what}: scores");
                            assert_eq!(max[r].to_bits(), m1.to_bits(), "{what}: max");
                            assert_eq!(sum[r].to_bits(), l1.to_bits(), "{what}: sum");
                            assert_eq!(bits(&acc[r * hd..][..hd]), bits(&a1), "{what}: acc");
                        }
                    }
                }
            }
        }
    }

    /// F16C widening agrees with `half` on every non-NaN f16 (NaNs may differ in payload only).
    #[test]
    fn f32_to_f16_matches_half_with_saturation() {
        if !(is_x86_feature_detected!("avx2") && is_x86_feature_detected!("f16c")) {
            return;
        }
        // Every f16 value, the midpoints between neighbours (ties to even), values past the
        // range and infinities, and a tail that is not a multiple of 8.
        let mut src: Vec<f32> = Vec::new();
        for b in 0..=u16::MAX {
            let v = half::f16::from_bits(b).to_f32();
            if v.is_finite() {
                let next = half::f16::from_bits(b.wrapping_add(1)).to_f32();
                src.push(v);
                if next.is_finite() && (next - v).abs() < 1e5 {
                    src.push(v + (next - v) / 2.0);
                }
            }
        }
        src.extend([
            7e4,
            -7e4,
            1e30,
            f32::INFINITY,
            f32::NEG_INFINITY,
            65519.0,
            65520.0,
            0.1,
        ]);
        let mut got = vec![0u16; src.len()];
        // SAFETY: AVX2 and F16C checked above; equal lengths.
        unsafe { f32_to_f16_saturating(&src, &mut got) };
        for (&x, &g) in src.iter().zip(&got) {
            let want = half::f16::from_f32(x.clamp(-65504.0, 65504.0)).to_bits();
            assert_eq!(g, want, "{x}");
        }
        let mut nan = [0u16; 9];
        // SAFETY: as above.
        unsafe { f32_to_f16_saturating(&[f32::NAN; 9], &mut nan) };
        assert!(
            nan.iter().all(|&h| half::f16::from_bits(h).is_nan()),
            "NaN stays NaN"
        );
    }

    #[test]
    fn f16_to_f32_matches_half_on_every_value() {
        if !(is_x86_feature_detected!("avx2") && is_x86_feature_detected!("f16c")) {
            return;
        }
        let src: Vec<u16> = (0..=u16::MAX)
            .filter(|&b| !half::f16::from_bits(b).is_nan())
            .chain([0x3c00; 5]) // a tail that is not a multiple of 8
            .collect();
        let mut got = vec![0.0f32; src.len()];
        // SAFETY: AVX2 and F16C checked above; equal lengths.
        unsafe { f16_to_f32(&src, &mut got) };
        for (&b, &g) in src.iter().zip(&got) {
            let want = half::f16::from_bits(b).to_f32();
            assert_eq!(g.to_bits(), want.to_bits(), "f16 bits {b:#06x}");
        }
    }
}
