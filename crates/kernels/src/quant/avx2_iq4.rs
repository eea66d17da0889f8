//! AVX2 dot products for IQ4_NL (against Q8_0) and IQ4_XS (against Q8_K): the nibbles index
//! the 16-entry grid with one `pshufb`, then the signed products run as for Q4_0. Same integer
//! sums as the scalar references in `iq4.rs`; the safety contract is `avx2.rs`'s.

#![allow(clippy::missing_safety_doc, clippy::needless_range_loop)]

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use super::avx2::{dot_signed_q8_0, f16x2, f32_load, hsum_ps, load256, nibbles_32};
use super::iq4::KVALUES;

/// The grid in both 128-bit lanes, for `_mm256_shuffle_epi8`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn grid() -> __m256i {
    // SAFETY: KVALUES is 16 bytes, read unaligned.
    let g = unsafe { _mm_loadu_si128(KVALUES.as_ptr() as *const __m128i) };
    _mm256_set_m128i(g, g)
}

/// 16 bytes of grid indices at `p` to the 32 signed grid values (elements 0..16 then 16..32).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn grid_32(p: *const u8, grid: __m256i) -> __m256i {
    _mm256_shuffle_epi8(grid, unsafe { nibbles_32(p) })
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_iq4_nl<const R: usize>(w: &[u8], a: &[u8], out: &mut [f32]) {
    let g = grid();
    unsafe { dot_signed_q8_0::<R, 18>(w, a, out, |xb| grid_32(xb.add(2), g)) }
}

/// IQ4_XS . Q8_K: per super-block, 8 sub-blocks of 32 with their own 6-bit scales; the integer
/// sum of the block is scaled once by `d_x d_y`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_iq4_xs<const R: usize>(w: &[u8], a: &[u8], out: &mut [f32]) {
    const WB: usize = 136;
    const AB: usize = 292;
    let nb = w.len() / WB;
    let stride = nb * AB;
    let (wp, ap) = (w.as_ptr(), a.as_ptr());
    let g = grid();
    unsafe {
        let mut acc = [_mm256_setzero_ps(); R];
        for ib in 0..nb {
            let xb = wp.add(ib * WB);
            let dx = _mm_cvtss_f32(f16x2((xb as *const u16).read_unaligned() as u32));
            let scales_h = (xb.add(2) as *const u16).read_unaligned() as u32;
            let mut sumi = [_mm256_setzero_si256(); R];
            for sb in 0..8 {
                let low = (*xb.add(4 + sb / 2) >> (4 * (sb % 2))) & 0x0F;
                let high = ((scales_h >> (2 * sb)) & 3) as u8;
                let ls = _mm256_set1_epi16((low | (high << 4)) as i16 - 32);
                let qx = grid_32(xb.add(8 + 16 * sb), g);
                let ax = _mm256_sign_epi8(qx, qx);
                for r in 0..R {
                    let y = load256(ap.add(r * stride + ib * AB + 4 + 32 * sb));
                    let p = _mm256_maddubs_epi16(ax, _mm256_sign_epi8(y, qx));
                    sumi[r] = _mm256_add_epi32(sumi[r], _mm256_madd_epi16(p, ls));
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
