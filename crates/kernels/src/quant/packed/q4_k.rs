//! Q4_K weights (against Q8_K activations) in group-block layout, 1184 bytes per 8 rows'
//! 256-element super-block (the GGUF's 1152 plus the 6-bit scales unpacked to bytes):
//! `[0..16)` the rows' f16 `d`, `[16..32)` their f16 `dmin`; `[32..160)` for each 32-element
//! sub-block `j` 16 bytes at `32 + 16j`: byte `r` is row r's scale, byte `8 + r` its min; then
//! the quants, at `160 + 256c + 32s` (chunk c of 64 elements, step s of 4) row `r`'s file
//! bytes `qs[32c + 4s..32c + 4s + 4]` in bytes `4r..4r + 4`: low nibbles are elements
//! `64c + 4s + b` (sub-block 2c), high nibbles `64c + 32 + 4s + b` (sub-block 2c + 1).
//!
//! Per super-block and row the integer sums are exact: `isum = sum_j sc_j (q . y)_j` and
//! `msum = sum_j m_j ysum_j` (the 32-element activation sums from two Q8_K bsums). The f32
//! operations are `acc = fma(d_x * d_y, isum, acc)` then `acc = fma(dmin_x * d_y, -msum, acc)`,
//! in the kernel lanes and the reference alike; the integer sums being exact, the kernel may
//! group them as it likes (one sub-block at a time, which keeps a row's state small).

#![allow(clippy::needless_range_loop)]

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use super::super::k_quants::scale_min_k4;
use super::{GROUP_ROWS, PackedKernels, f16_at};

const GROUP_BYTES: usize = 32 + 8 * 16 + 1024;
/// Offset of the scale/min bytes and of the quants in a group block.
const SCALES: usize = 32;
const QS: usize = 160;
/// A Q8_K activation block: f32 d, 256 i8 quants, 16 i16 sums of 16 quants.
const ACT_BLOCK: usize = 292;
const BSUMS: usize = 260;

pub(super) static KERNELS: PackedKernels = PackedKernels {
    group_bytes: GROUP_BYTES,
    pack_group,
    gemm: &[
        gemm::<1>, gemm::<2>, gemm::<3>, gemm::<4>, gemm::<5>, gemm::<6>, gemm::<7>,
    ],
    gemv: None,
    vnni: None,
    max_mr: 3,
    // No 8-row kernel: 8 rows' i16 and i32 sums alone fill the 16 registers, and an 8-row
    // call of Qwen 1.5B's gate/up took 1.9 ms where 4 + 4 took 1.0-1.2.
    few_rows_mr: Some(7),
    unpacked: None,
    reference,
};

/// Packs 8 rows' GGUF Q4_K blocks (`d: f16, dmin: f16, scales[12], qs[128]`, ggml-quants.c
/// dequantize_row_q4_K; the 12 scale bytes decoded by get_scale_min_k4).
fn pack_group(src: [&[u8]; GROUP_ROWS], dst: &mut [u8]) {
    for (r, b) in src.iter().enumerate() {
        dst[2 * r..2 * r + 2].copy_from_slice(&b[0..2]);
        dst[16 + 2 * r..18 + 2 * r].copy_from_slice(&b[2..4]);
        for j in 0..8 {
            let (sc, m) = scale_min_k4(j, &b[4..16]);
            dst[SCALES + 16 * j + r] = sc;
            dst[SCALES + 16 * j + 8 + r] = m;
        }
        for c in 0..4 {
            for s in 0..8 {
                let at = QS + 256 * c + 32 * s + 4 * r;
                let from = 16 + 32 * c + 4 * s;
                dst[at..at + 4].copy_from_slice(&b[from..from + 4]);
            }
        }
    }
}

fn bsum(y: &[u8], i: usize) -> i32 {
    i16::from_le_bytes([y[BSUMS + 2 * i], y[BSUMS + 2 * i + 1]]) as i32
}

fn reference(w: &[u8], a: &[u8], out: &mut [f32; GROUP_ROWS]) {
    let mut acc = [0.0f32; GROUP_ROWS];
    for (g, y) in w.chunks_exact(GROUP_BYTES).zip(a.chunks_exact(ACT_BLOCK)) {
        let yd = f32::from_le_bytes([y[0], y[1], y[2], y[3]]);
        for r in 0..GROUP_ROWS {
            let (mut isum, mut msum) = (0i32, 0i32);
            for j in 0..8 {
                let sc = g[SCALES + 16 * j + r] as i32;
                let m = g[SCALES + 16 * j + 8 + r] as i32;
                let (c, shift) = (j / 2, 4 * (j % 2));
                let mut s = 0i32;
                for st in 0..8 {
                    for b in 0..4 {
                        let q = (g[QS + 256 * c + 32 * st + 4 * r + b] >> shift) & 0x0F;
                        s += q as i32 * y[4 + 32 * j + 4 * st + b] as i8 as i32;
                    }
                }
                isum += sc * s;
                msum += m * (bsum(y, 2 * j) + bsum(y, 2 * j + 1));
            }
            acc[r] = (f16_at(g, 2 * r) * yd).mul_add(isum as f32, acc[r]);
            acc[r] = (f16_at(g, 16 + 2 * r) * yd).mul_add(-msum as f32, acc[r]);
        }
    }
    *out = acc;
}

/// pshufb pattern turning the 16 scale/min bytes of a sub-block (broadcast to both 128-bit
/// halves) into 16 i16 lanes where lanes `2r` and `2r + 1` (the lanes maddubs fills from row r's
/// quants) both hold byte `first + r`, zero-extended.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn row_pairs_mask(first: i8) -> __m256i {
    let z = -128i8; // 0x80: pshufb writes zero
    let lane = |r: i8| [first + r, z, first + r, z];
    let (a, b, c, d) = (lane(0), lane(1), lane(2), lane(3));
    let (e, f, g, h) = (lane(4), lane(5), lane(6), lane(7));
    _mm256_setr_epi8(
        a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3], c[0], c[1], c[2], c[3], d[0], d[1], d[2],
        d[3], e[0], e[1], e[2], e[3], f[0], f[1], f[2], f[3], g[0], g[1], g[2], g[3], h[0], h[1],
        h[2], h[3],
    )
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
        let sc_mask = row_pairs_mask(0);
        let mn_mask = row_pairs_mask(8);
        let mut acc = [_mm256_setzero_ps(); MR];
        for ib in 0..nb {
            let g = w.add(ib * GROUP_BYTES);
            super::prefetch_next_group(g, nb, GROUP_BYTES);
            let ab = a.add(ib * ACT_BLOCK);
            let isum = if MR <= 3 {
                chunk_sums::<MR>(g, ab, a_row, m4, sc_mask)
            } else {
                sub_block_sums::<MR>(g, ab, a_row, m4, sc_mask)
            };
            // Mins: lanes 2r, 2r + 1 hold m_j of row r against the sub-block's two 16-element
            // sums, so madd gives m_j * ysum_j per row (at most 63 * 32 * 127 per sub-block).
            let mut msum = [_mm256_setzero_si256(); MR];
            for j in 0..8 {
                let mn = scales(g, j, mn_mask);
                for i in 0..MR {
                    let bp = ab.add(i * a_row + BSUMS + 4 * j) as *const i32;
                    let bs = _mm256_set1_epi32(bp.read_unaligned());
                    msum[i] = _mm256_add_epi32(msum[i], _mm256_madd_epi16(mn, bs));
                }
            }
            let dx = _mm256_cvtph_ps(_mm_loadu_si128(g as *const __m128i));
            let dmx = _mm256_cvtph_ps(_mm_loadu_si128(g.add(16) as *const __m128i));
            for i in 0..MR {
                let yd = _mm256_set1_ps((ab.add(i * a_row) as *const f32).read_unaligned());
                let is = _mm256_cvtepi32_ps(isum[i]);
                let ms = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_setzero_si256(), msum[i]));
                acc[i] = _mm256_fmadd_ps(_mm256_mul_ps(dx, yd), is, acc[i]);
                acc[i] = _mm256_fmadd_ps(_mm256_mul_ps(dmx, yd), ms, acc[i]);
            }
        }
        for i in 0..MR {
            _mm256_storeu_ps(y.add(i * ldy), acc[i]);
        }
    }
}

/// `isum` of [`gemm`] for up to 3 rows: a 64-element chunk (two sub-blocks, from the low and
/// high nibbles of the same bytes) at a time, each byte loaded and split once for both. `m4`
/// is the nibble mask, `sc_mask` [`row_pairs_mask`]`(0)`.
#[inline(always)]
unsafe fn chunk_sums<const MR: usize>(
    g: *const u8,
    ab: *const u8,
    a_row: usize,
    m4: __m256i,
    sc_mask: __m256i,
) -> [__m256i; MR] {
    // SAFETY: `gemm`'s contract: block `g` and the rows' activation blocks at `ab` in bounds.
    unsafe {
        let mut isum = [_mm256_setzero_si256(); MR];
        for c in 0..4 {
            // Quants 0..=15 times activations in -127..=127 (Q8_K maps the extreme to -127 and
            // caps at 127): a maddubs i16 lane is at most 2 * 15 * 127 = 3810, and the 8 steps
            // of a sub-block sum to at most 30480, inside i16.
            let mut s16lo = [_mm256_setzero_si256(); MR];
            let mut s16hi = [_mm256_setzero_si256(); MR];
            for s in 0..8 {
                let q = _mm256_loadu_si256(g.add(QS + 256 * c + 32 * s) as *const __m256i);
                let lo = _mm256_and_si256(q, m4);
                let hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                for i in 0..MR {
                    let yp = ab.add(i * a_row + 4 + 64 * c + 4 * s) as *const i32;
                    let ylo = _mm256_set1_epi32(yp.read_unaligned());
                    let yhi = _mm256_set1_epi32(yp.add(8).read_unaligned());
                    s16lo[i] = _mm256_add_epi16(s16lo[i], _mm256_maddubs_epi16(lo, ylo));
                    s16hi[i] = _mm256_add_epi16(s16hi[i], _mm256_maddubs_epi16(hi, yhi));
                }
            }
            let sc_lo = scales(g, 2 * c, sc_mask);
            let sc_hi = scales(g, 2 * c + 1, sc_mask);
            for i in 0..MR {
                let p = _mm256_add_epi32(
                    _mm256_madd_epi16(s16lo[i], sc_lo),
                    _mm256_madd_epi16(s16hi[i], sc_hi),
                );
                isum[i] = _mm256_add_epi32(isum[i], p);
            }
        }
        isum
    }
}

/// `isum` of [`gemm`] for 4 to 7 rows: one 32-element sub-block at a time, so a row's state is
/// one i16 and one i32 accumulator and up to 7 rows share each load and split of the weights
/// (taking 3 rows per call repeated that work per 3 rows; with two sub-blocks at a time, 4 rows'
/// state spilled out of the 16 registers). The same exact integer sums as [`chunk_sums`].
#[inline(always)]
unsafe fn sub_block_sums<const MR: usize>(
    g: *const u8,
    ab: *const u8,
    a_row: usize,
    m4: __m256i,
    sc_mask: __m256i,
) -> [__m256i; MR] {
    // SAFETY: as `chunk_sums`.
    unsafe {
        let mut isum = [_mm256_setzero_si256(); MR];
        // A trip count LLVM cannot see keeps the chunk loop a loop: unrolled whole, its 8
        // sub-blocks were scheduled as one body, and 6- and 7-row calls ran 10-25% slower.
        for c in 0..std::hint::black_box(4) {
            sub_block::<MR, false>(g, ab, a_row, c, m4, sc_mask, &mut isum);
            sub_block::<MR, true>(g, ab, a_row, c, m4, sc_mask, &mut isum);
        }
        isum
    }
}

/// Adds sub-block `2c` (the low nibbles of chunk `c`) or `2c + 1` (`HIGH`: the high nibbles)
/// to `isum`. Which nibbles is a constant so that the step loop has no branch: with `j % 2`
/// tested at run time, LLVM hoisted 4- and 7-row calls' activation broadcasts of all 8 steps
/// into stack slots and read them back (those calls ran 1.5-2x slower per row than 5).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn sub_block<const MR: usize, const HIGH: bool>(
    g: *const u8,
    ab: *const u8,
    a_row: usize,
    c: usize,
    m4: __m256i,
    sc_mask: __m256i,
    isum: &mut [__m256i; MR],
) {
    // SAFETY: as `chunk_sums`; the bounds of `chunk_sums` hold for each sub-block.
    unsafe {
        let j = 2 * c + HIGH as usize;
        let qs = g.add(QS + 256 * c);
        let mut s16 = [_mm256_setzero_si256(); MR];
        for s in 0..8 {
            let q = _mm256_loadu_si256(qs.add(32 * s) as *const __m256i);
            let v = if HIGH {
                _mm256_and_si256(_mm256_srli_epi16(q, 4), m4)
            } else {
                _mm256_and_si256(q, m4)
            };
            for i in 0..MR {
                let yp = ab.add(i * a_row + 4 + 32 * j + 4 * s) as *const i32;
                let yv = _mm256_set1_epi32(yp.read_unaligned());
                s16[i] = _mm256_add_epi16(s16[i], _mm256_maddubs_epi16(v, yv));
            }
        }
        let sc = scales(g, j, sc_mask);
        for i in 0..MR {
            isum[i] = _mm256_add_epi32(isum[i], _mm256_madd_epi16(s16[i], sc));
        }
    }
}

/// Sub-block `j`'s 16 scale/min bytes broadcast to both halves and shuffled by `mask`
/// ([`row_pairs_mask`]).
#[inline(always)]
unsafe fn scales(g: *const u8, j: usize, mask: __m256i) -> __m256i {
    // SAFETY: AVX2 callers only; the 16 bytes lie inside the group block.
    unsafe {
        let sm =
            _mm256_broadcastsi128_si256(_mm_loadu_si128(g.add(SCALES + 16 * j) as *const __m128i));
        _mm256_shuffle_epi8(sm, mask)
    }
}
