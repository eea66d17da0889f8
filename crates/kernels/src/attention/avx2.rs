//! AVX2 inner loop of paged attention: one row's online-softmax update over a run of keys.

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
