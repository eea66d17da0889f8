//! Q8_0 weights (against Q8_0 activations) in group-block layout, 272 bytes per 8 rows' block:
//! `[0..16)` the 8 rows' f16 `d`; then 8 chunks of 32 bytes, chunk `c` holding quants
//! `4c..4c + 4` of row `r` in bytes `4r..4r + 4`.
//!
//! Per block and row the integer dot is exact; the f32 operations are
//! `acc = fma(d_x * d_y, isum, acc)`, the same in the kernel lanes and the reference.

#![allow(clippy::needless_range_loop)]

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use super::{GROUP_ROWS, PackedKernels, f16_at};

const GROUP_BYTES: usize = 16 + 8 * 32;
/// A Q8_0 block: f16 d, 32 i8 quants (weights and activations alike).
const BLOCK: usize = 34;

pub(super) static KERNELS: PackedKernels = PackedKernels {
    group_bytes: GROUP_BYTES,
    pack_group,
    gemm: &[gemm::<1>, gemm::<2>, gemm::<3>, gemm::<4>],
    gemv: Some(gemv::<{ super::STREAMS }>),
    vnni: Some(&[
        gemm_vnni::<1>,
        gemm_vnni::<2>,
        gemm_vnni::<3>,
        gemm_vnni::<4>,
    ]),
    max_mr: 4,
    few_rows_mr: None,
    unpacked: None,
    reference,
};

fn pack_group(src: [&[u8]; GROUP_ROWS], dst: &mut [u8]) {
    for (r, b) in src.iter().enumerate() {
        dst[2 * r..2 * r + 2].copy_from_slice(&b[0..2]);
        for c in 0..8 {
            let at = 16 + 32 * c + 4 * r;
            dst[at..at + 4].copy_from_slice(&b[2 + 4 * c..6 + 4 * c]);
        }
    }
}

fn reference(w: &[u8], a: &[u8], out: &mut [f32; GROUP_ROWS]) {
    let mut acc = [0.0f32; GROUP_ROWS];
    for (g, y) in w.chunks_exact(GROUP_BYTES).zip(a.chunks_exact(BLOCK)) {
        let dy = f16_at(y, 0);
        for r in 0..GROUP_ROWS {
            let mut isum = 0i32;
            for c in 0..8 {
                for b in 0..4 {
                    let q = g[16 + 32 * c + 4 * r + b] as i8 as i32;
                    isum += q * y[2 + 4 * c + b] as i8 as i32;
                }
            }
            acc[r] = (f16_at(g, 2 * r) * dy).mul_add(isum as f32, acc[r]);
        }
    }
    *out = acc;
}

/// See [`super::GemmFn`] for the contract.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn gemm<const MR: usize>(
    w: *const u8,
    nb: usize,
    a: *const u8,
    a_row: usize,
    y: *mut f32,
    ldy: usize,
) {
    if MR == 1 {
        // SAFETY: the one-row contract is `gemv`'s for one group.
        return unsafe { gemv::<1>([w], nb, a, [y]) };
    }
    unsafe {
        let ones = _mm256_set1_epi16(1);
        let mut acc = [_mm256_setzero_ps(); MR];
        for ib in 0..nb {
            let g = w.add(ib * GROUP_BYTES);
            let ab = a.add(ib * BLOCK);
            let mut isum = [_mm256_setzero_si256(); MR];
            for c in 0..8 {
                let q = _mm256_loadu_si256(g.add(16 + 32 * c) as *const __m256i);
                // maddubs multiplies unsigned by signed: move the weights' signs onto the
                // activations (ggml's trick), |q| * sign(q) y == q y.
                let aq = _mm256_sign_epi8(q, q);
                for i in 0..MR {
                    let y4 = (ab.add(i * a_row + 2 + 4 * c) as *const i32).read_unaligned();
                    let sy = _mm256_sign_epi8(_mm256_set1_epi32(y4), q);
                    let p = _mm256_madd_epi16(_mm256_maddubs_epi16(aq, sy), ones);
                    isum[i] = _mm256_add_epi32(isum[i], p);
                }
            }
            let dx = _mm256_cvtph_ps(_mm_loadu_si128(g as *const __m128i));
            for i in 0..MR {
                let dy = (ab.add(i * a_row) as *const u16).read_unaligned();
                let dy = _mm256_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(dy as i32)));
                acc[i] =
                    _mm256_fmadd_ps(_mm256_mul_ps(dx, dy), _mm256_cvtepi32_ps(isum[i]), acc[i]);
            }
        }
        for i in 0..MR {
            _mm256_storeu_ps(y.add(i * ldy), acc[i]);
        }
    }
}

/// [`gemm`] with AVX-VNNI, over activation quants offset to unsigned (`super::offset_quants`):
/// `vpdpbusd` sums 4 products of u8 `y + 128` and i8 `q` into each i32 lane with no 16-bit
/// intermediate to saturate, one instruction where `gemm` spends four per 32 products; the
/// `128 * sum(q)` it adds is summed once per chunk for all rows (`vpdpbusd` of 0x80 bytes) and
/// taken off per block. That leaves each row's block sum the exact integer `gemm` computes,
/// and the f32 operations after it are `gemm`'s, so the bits are too.
///
/// # Safety
/// [`super::GemmFn`]'s contract with AVX-VNNI as well, and activations offset as above.
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
unsafe fn gemm_vnni<const MR: usize>(
    w: *const u8,
    nb: usize,
    a: *const u8,
    a_row: usize,
    y: *mut f32,
    ldy: usize,
) {
    unsafe {
        let offset = _mm256_set1_epi8(0x80u8 as i8);
        let mut acc = [_mm256_setzero_ps(); MR];
        for ib in 0..nb {
            let g = w.add(ib * GROUP_BYTES);
            let ab = a.add(ib * BLOCK);
            let mut isum = [_mm256_setzero_si256(); MR];
            let mut bias = _mm256_setzero_si256();
            for c in 0..8 {
                let q = _mm256_loadu_si256(g.add(16 + 32 * c) as *const __m256i);
                bias = _mm256_dpbusd_avx_epi32(bias, offset, q);
                for i in 0..MR {
                    let y4 = (ab.add(i * a_row + 2 + 4 * c) as *const i32).read_unaligned();
                    isum[i] = _mm256_dpbusd_avx_epi32(isum[i], _mm256_set1_epi32(y4), q);
                }
            }
            let dx = _mm256_cvtph_ps(_mm_loadu_si128(g as *const __m128i));
            for i in 0..MR {
                let dy = (ab.add(i * a_row) as *const u16).read_unaligned();
                let dy = _mm256_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(dy as i32)));
                let isum = _mm256_sub_epi32(isum[i], bias);
                acc[i] = _mm256_fmadd_ps(_mm256_mul_ps(dx, dy), _mm256_cvtepi32_ps(isum), acc[i]);
            }
        }
        for i in 0..MR {
            _mm256_storeu_ps(y.add(i * ldy), acc[i]);
        }
    }
}

/// One activation row against `G` groups, a block of each in turn (see [`super::GemvFn`]); per
/// group, the operations `gemm` performs for each of its rows.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn gemv<const G: usize>(w: [*const u8; G], nb: usize, a: *const u8, y: [*mut f32; G]) {
    unsafe {
        let ones = _mm256_set1_epi16(1);
        let mut acc = [_mm256_setzero_ps(); G];
        for ib in 0..nb {
            let ab = a.add(ib * BLOCK);
            let dy = (ab as *const u16).read_unaligned();
            let dy = _mm256_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(dy as i32)));
            for s in 0..G {
                // No software prefetch: with four streams it measured slower than without.
                let g = w[s].add(ib * GROUP_BYTES);
                let mut isum = _mm256_setzero_si256();
                for c in 0..8 {
                    let q = _mm256_loadu_si256(g.add(16 + 32 * c) as *const __m256i);
                    let aq = _mm256_sign_epi8(q, q);
                    let y4 = (ab.add(2 + 4 * c) as *const i32).read_unaligned();
                    let sy = _mm256_sign_epi8(_mm256_set1_epi32(y4), q);
                    let p = _mm256_madd_epi16(_mm256_maddubs_epi16(aq, sy), ones);
                    isum = _mm256_add_epi32(isum, p);
                }
                let dx = _mm256_cvtph_ps(_mm_loadu_si128(g as *const __m128i));
                acc[s] = _mm256_fmadd_ps(_mm256_mul_ps(dx, dy), _mm256_cvtepi32_ps(isum), acc[s]);
            }
        }
        for s in 0..G {
            _mm256_storeu_ps(y[s], acc[s]);
        }
    }
}
