//! Q4_1 weights (against Q8_1 activations) in group-block layout, 160 bytes per 8 rows' block:
//! `[0..16)` the rows' f16 `d`, `[16..32)` their f16 `m`, then 4 steps of 32 bytes, row `r`'s 4
//! bytes in bytes `4r..4r + 4` of each. Number the block's elements in 8 runs of 4 (run `u` is
//! elements `4u..4u + 4`; the GGUF block keeps runs 0-3 in its bytes' low nibbles and 4-7 in
//! their high ones). At step `c` row `r` holds run `u = (r + c) % 8` in its low nibbles and run
//! `(u + 4) % 8` in its high ones: the file's bytes `4u..` when `u < 4`, else those of run
//! `u - 4` with their nibbles swapped. The rows are thus rotated against each other, so the 8
//! runs of activation quants row `r` needs at step `c`, in lane order, are 32 consecutive bytes
//! starting at run `c` of the activation quants written twice in a row ([`ACT_BLOCK`]): the
//! kernel multiplies the weights by plain loads of the activations (folded into `vpmaddubsw`)
//! instead of a 4-byte broadcast per row and step. In an L1-resident 18-block product this is
//! 32.5 cycles per block and 4 rows at 3 rows per call, against 34.8 for broadcasts at 4 rows
//! per call (their best).
//!
//! Per block and row: `acc = fma(d_x * d_y, isum, acc)` then `acc = fma(m_x, s_y, acc)`, in the
//! kernel lanes and the reference alike (one accumulator per row; at 3 rows per call every
//! row's integer and float state stays in registers).

#![allow(clippy::needless_range_loop)]

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use super::{GROUP_ROWS, PackedKernels, f16_at, f32_at};

const GROUP_BYTES: usize = 32 + 4 * 32;
/// An activation block: Q8_1's `d` and `s = d * sum(q)` (f16 values) widened to f32, then its
/// 32 i8 quants twice (see the module comment).
pub(super) const ACT_BLOCK: usize = 72;
/// A Q8_1 block as the quantizer writes it: f16 d, f16 s, 32 i8 quants.
#[cfg(test)]
const Q8_1_BLOCK: usize = 36;

/// The activation layout the long way (tests, the reference of `super::quantize_wide`): the
/// plain Q8_1 quantizer, then its block rewritten into the [`ACT_BLOCK`] layout.
#[cfg(test)]
pub(super) fn quantize_activations_via_q8_1(src: &[f32], dst: &mut [u8]) {
    super::requantize::<Q8_1_BLOCK>(crate::quant::GgmlType::Q8_1, src, dst, ACT_BLOCK, |q, b| {
        b[0..4].copy_from_slice(&f16_at(q, 0).to_le_bytes());
        b[4..8].copy_from_slice(&f16_at(q, 2).to_le_bytes());
        b[8..40].copy_from_slice(&q[4..36]);
        b[40..72].copy_from_slice(&q[4..36]);
    });
}

pub(super) static KERNELS: PackedKernels = PackedKernels {
    group_bytes: GROUP_BYTES,
    pack_group,
    gemm: &[gemm::<1>, gemm::<2>, gemm::<3>, gemm::<4>],
    gemv: None,
    vnni: None,
    max_mr: 3,
    few_rows_mr: None,
    unpacked: None,
    reference,
};

/// The activation run paired with the low nibbles of row `r`'s bytes at step `c`.
fn run_at(r: usize, c: usize) -> usize {
    (r + c) % 8
}

fn pack_group(src: [&[u8]; GROUP_ROWS], dst: &mut [u8]) {
    for (r, b) in src.iter().enumerate() {
        dst[2 * r..2 * r + 2].copy_from_slice(&b[0..2]);
        dst[16 + 2 * r..18 + 2 * r].copy_from_slice(&b[2..4]);
        for c in 0..4 {
            let u = run_at(r, c);
            let at = 32 + 32 * c + 4 * r;
            for k in 0..4 {
                let q = b[4 + 4 * (u % 4) + k];
                dst[at + k] = if u < 4 { q } else { q.rotate_left(4) };
            }
        }
    }
}

fn reference(w: &[u8], a: &[u8], out: &mut [f32; GROUP_ROWS]) {
    let mut acc = [0.0f32; GROUP_ROWS];
    for (g, y) in w.chunks_exact(GROUP_BYTES).zip(a.chunks_exact(ACT_BLOCK)) {
        let (dy, sy) = (f32_at(y, 0), f32_at(y, 4));
        for r in 0..GROUP_ROWS {
            let mut isum = 0i32;
            for c in 0..4 {
                let u = run_at(r, c);
                for b in 0..4 {
                    let q = g[32 + 32 * c + 4 * r + b];
                    isum += (q & 0x0F) as i32 * y[8 + 4 * u + b] as i8 as i32;
                    isum += (q >> 4) as i32 * y[8 + 4 * ((u + 4) % 8) + b] as i8 as i32;
                }
            }
            acc[r] = (f16_at(g, 2 * r) * dy).mul_add(isum as f32, acc[r]);
            acc[r] = f16_at(g, 16 + 2 * r).mul_add(sy, acc[r]);
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
    unsafe {
        let m4 = _mm256_set1_epi8(0x0F);
        let ones = _mm256_set1_epi16(1);
        let mut acc = [_mm256_setzero_ps(); MR];
        for ib in 0..nb {
            let g = w.add(ib * GROUP_BYTES);
            super::prefetch_next_group(g, nb, GROUP_BYTES);
            let ab = a.add(ib * ACT_BLOCK);
            // Eight products of at most 2 * 15 * 128 each fit an i16 lane: sum them there and
            // widen once per block.
            let mut s16 = [_mm256_setzero_si256(); MR];
            for c in 0..4 {
                let q = _mm256_loadu_si256(g.add(32 + 32 * c) as *const __m256i);
                let lo = _mm256_and_si256(q, m4);
                let hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                for i in 0..MR {
                    // Runs c.. (low nibbles) and c + 4.. (high), lane r taking run c + r.
                    let yp = ab.add(i * a_row + 8 + 4 * c);
                    let ylo = _mm256_loadu_si256(yp as *const __m256i);
                    let yhi = _mm256_loadu_si256(yp.add(16) as *const __m256i);
                    let p = _mm256_add_epi16(
                        _mm256_maddubs_epi16(lo, ylo),
                        _mm256_maddubs_epi16(hi, yhi),
                    );
                    s16[i] = _mm256_add_epi16(s16[i], p);
                }
            }
            let dx = _mm256_cvtph_ps(_mm_loadu_si128(g as *const __m128i));
            let mx = _mm256_cvtph_ps(_mm_loadu_si128(g.add(16) as *const __m128i));
            for i in 0..MR {
                let dy = _mm256_broadcast_ss(&*(ab.add(i * a_row) as *const f32));
                let sy = _mm256_broadcast_ss(&*(ab.add(i * a_row + 4) as *const f32));
                let isum = _mm256_cvtepi32_ps(_mm256_madd_epi16(s16[i], ones));
                acc[i] = _mm256_fmadd_ps(_mm256_mul_ps(dx, dy), isum, acc[i]);
                acc[i] = _mm256_fmadd_ps(mx, sy, acc[i]);
            }
        }
        for i in 0..MR {
            _mm256_storeu_ps(y.add(i * ldy), acc[i]);
        }
    }
}
