//! AVX2 dot products for Q2_K and Q3_K against Q8_K. Both hold 2-bit quants four to a byte
//! with a scale per 16 elements; a 32-byte vector of one bit-pair covers two sub-blocks, so
//! each product takes its scales as a pair (Q6_K's `pair_mask`). Same integer sums as
//! `k_quants_low.rs`; the safety contract is `avx2.rs`'s.

#![allow(clippy::missing_safety_doc, clippy::needless_range_loop)]

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use super::avx2::{f16x2, f32_load, hsum_ps, load256, pair_mask};
use super::k_quants::QK_K;
use super::k_quants_low::q3_scales;

const AB: usize = 292;

/// Bits `2 j .. 2 j + 2` of every byte of `bits`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn crumbs(bits: __m256i, j: usize) -> __m256i {
    let shifted = _mm256_srl_epi16(bits, _mm_cvtsi32_si128(2 * j as i32));
    _mm256_and_si256(shifted, _mm256_set1_epi8(3))
}

/// Q2_K . Q8_K: `d_y (d sum_s sc_s (q . y)_s - dmin sum_s m_s bsum_s)`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q2_k<const R: usize>(w: &[u8], a: &[u8], out: &mut [f32]) {
    const WB: usize = 84;
    let nb = w.len() / WB;
    let stride = nb * AB;
    let (wp, ap) = (w.as_ptr(), a.as_ptr());
    let m4 = _mm_set1_epi8(0x0F);
    unsafe {
        let mut acc = [_mm256_setzero_ps(); R];
        for ib in 0..nb {
            let xb = wp.add(ib * WB);
            let dd = f16x2((xb.add(80) as *const u32).read_unaligned());
            let (dx, dminx) = (_mm_cvtss_f32(dd), _mm_cvtss_f32(_mm_movehdup_ps(dd)));
            let sc8 = _mm_loadu_si128(xb as *const __m128i);
            let scales = _mm_and_si128(sc8, m4);
            let mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc8, 4), m4));
            let mut sumi = [_mm256_setzero_si256(); R];
            let mut summs = [_mm256_setzero_si256(); R];
            for r in 0..R {
                let bsums = load256(ap.add(r * stride + ib * AB + 4 + QK_K));
                summs[r] = _mm256_madd_epi16(mins, bsums);
            }
            for n in 0..2 {
                let bits = load256(xb.add(16 + 32 * n));
                for j in 0..4 {
                    let q = crumbs(bits, j);
                    let sc =
                        _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales, pair_mask(8 * n + 2 * j)));
                    for r in 0..R {
                        let y = load256(ap.add(r * stride + ib * AB + 4 + 128 * n + 32 * j));
                        let p = _mm256_madd_epi16(sc, _mm256_maddubs_epi16(q, y));
                        sumi[r] = _mm256_add_epi32(sumi[r], p);
                    }
                }
            }
            for r in 0..R {
                let yd = f32_load(ap.add(r * stride + ib * AB));
                acc[r] =
                    _mm256_fmadd_ps(_mm256_set1_ps(yd * dx), _mm256_cvtepi32_ps(sumi[r]), acc[r]);
                acc[r] = _mm256_fmadd_ps(
                    _mm256_set1_ps(-yd * dminx),
                    _mm256_cvtepi32_ps(summs[r]),
                    acc[r],
                );
            }
        }
        for r in 0..R {
            out[r] = hsum_ps(acc[r]);
        }
    }
}

/// Q3_K . Q8_K. The quant is `u - 4` with `u = low | high << 2` in 0..8, so the products run
/// unsigned and the offset comes off once per block through the activation sums:
/// `sum sc (u - 4) y = sum sc u y - 4 sum sc bsum`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q3_k<const R: usize>(w: &[u8], a: &[u8], out: &mut [f32]) {
    const WB: usize = 110;
    let nb = w.len() / WB;
    let stride = nb * AB;
    let (wp, ap) = (w.as_ptr(), a.as_ptr());
    let one = _mm256_set1_epi8(1);
    unsafe {
        let mut acc = [_mm256_setzero_ps(); R];
        for ib in 0..nb {
            let xb = wp.add(ib * WB);
            let block = std::slice::from_raw_parts(xb, WB);
            let dx = _mm_cvtss_f32(f16x2((xb.add(108) as *const u16).read_unaligned() as u32));
            let sc_arr = q3_scales(&block[96..108]);
            let sc8 = _mm_loadu_si128(sc_arr.as_ptr() as *const __m128i);
            let sc16 = _mm256_cvtepi8_epi16(sc8);
            let hmask = load256(xb);
            let mut sumi = [_mm256_setzero_si256(); R];
            for r in 0..R {
                let bsums = load256(ap.add(r * stride + ib * AB + 4 + QK_K));
                let off = _mm256_slli_epi32(_mm256_madd_epi16(sc16, bsums), 2);
                sumi[r] = _mm256_sub_epi32(sumi[r], off);
            }
            for n in 0..2 {
                let bits = load256(xb.add(32 + 32 * n));
                for j in 0..4 {
                    let k = (4 * n + j) as i32;
                    let high = _mm256_and_si256(_mm256_srl_epi16(hmask, _mm_cvtsi32_si128(k)), one);
                    let q = _mm256_or_si256(crumbs(bits, j), _mm256_slli_epi16(high, 2));
                    let sc = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8, pair_mask(8 * n + 2 * j)));
                    for r in 0..R {
                        let y = load256(ap.add(r * stride + ib * AB + 4 + 128 * n + 32 * j));
                        let p = _mm256_madd_epi16(sc, _mm256_maddubs_epi16(q, y));
                        sumi[r] = _mm256_add_epi32(sumi[r], p);
                    }
                }
            }
            for r in 0..R {
                let yd = f32_load(ap.add(r * stride + ib * AB));
                acc[r] =
                    _mm256_fmadd_ps(_mm256_set1_ps(dx * yd), _mm256_cvtepi32_ps(sumi[r]), acc[r]);
            }
        }
        for r in 0..R {
            out[r] = hsum_ps(acc[r]);
        }
    }
}
