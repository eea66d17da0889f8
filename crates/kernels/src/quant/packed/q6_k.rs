//! Q6_K weights (against Q8_K activations) in group-block layout, 1680 bytes per 8 rows'
//! 256-element super-block (the GGUF size): `[0..16)` the rows' f16 `d`; `[16..144)` the i8
//! scales, 16 bytes per pair `k` of 16-element sub-blocks, bytes `2r, 2r + 1` holding row r's
//! scales of sub-blocks `2k, 2k + 1`; then 96 bytes per sub-block `i` at `144 + 96i`: three
//! 32-byte vectors whose byte `4r + b` belongs to row r and holds, for the elements
//! `e_m = 16i + 4m + b` (m = 0..4) with 6-bit unsigned quant `q = low4 | high2 << 4`:
//! `low4(e_0) | low4(e_1) << 4`, `low4(e_2) | low4(e_3) << 4`, and
//! `high2(e_0) | high2(e_1) << 2 | high2(e_2) << 4 | high2(e_3) << 6`.
//!
//! The quants stay unsigned for maddubs; their `- 32` offset is applied once per super-block
//! through the Q8_K bsums: `sum_i sc_i (q - 32) . y = sum_i sc_i q . y - 32 sum_i sc_i bsum_i`,
//! exact in i32. The f32 operation is `acc = fma(d_x * d_y, isum, acc)`, in the kernel lanes
//! and the reference alike.

#![allow(clippy::needless_range_loop)]

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use super::{GROUP_ROWS, PackedKernels, Unpacked, f16_at};

const GROUP_BYTES: usize = 16 + 128 + 16 * 96;
/// Offsets of the scales and the quants in a group block.
const SCALES: usize = 16;
const QS: usize = 144;
/// A Q8_K activation block: f32 d, 256 i8 quants, 16 i16 sums of 16 quants.
const ACT_BLOCK: usize = 292;
const BSUMS: usize = 260;

pub(super) static KERNELS: PackedKernels = PackedKernels {
    group_bytes: GROUP_BYTES,
    pack_group,
    gemm: &[
        gemm::<1>, gemm::<2>, gemm::<3>, gemm::<4>, gemm::<5>, gemm::<6>, gemm::<7>, gemm::<8>,
    ],
    gemv: None,
    vnni: None,
    max_mr: 3,
    few_rows_mr: Some(8),
    unpacked: Some(Unpacked {
        block_bytes: UNPACKED_BYTES,
        unpack,
        gemm: &[
            gemm_unpacked::<1>,
            gemm_unpacked::<2>,
            gemm_unpacked::<3>,
            gemm_unpacked::<4>,
        ],
        max_mr: 3,
    }),
    reference,
};

/// An unpacked group block: `d` and the scales as in the group block, then per sub-block `i`
/// at `QS + 128i` the four 32-byte vectors of 6-bit quants (`0..=63`) [`gemm`] builds from its
/// 96 packed bytes, element `16i + 4m + b` of row r in byte `4r + b` of vector m.
const UNPACKED_BYTES: usize = QS + 16 * 128;

/// Unsigned 6-bit quant (0..=63) of element `e` of a GGUF Q6_K block (`ql[128], qh[64],
/// scales: i8[16], d: f16`): per 128-element half, `ql[l]` holds elements l (low nibble) and
/// l + 64 (high), `ql[l + 32]` elements l + 32 and l + 96, `qh[l]` their top 2 bits at shifts
/// 0, 2, 4, 6 (ggml-quants.c dequantize_row_q6_K).
fn q6_at(b: &[u8], e: usize) -> u8 {
    let (h, l) = (e / 128, e % 128);
    let (quad, l) = (l / 32, l % 32);
    let ql = b[64 * h + l + 32 * (quad % 2)];
    let low = if quad < 2 { ql & 0x0F } else { ql >> 4 };
    let high = (b[128 + 32 * h + l] >> (2 * quad)) & 3;
    low | (high << 4)
}

fn pack_group(src: [&[u8]; GROUP_ROWS], dst: &mut [u8]) {
    for (r, b) in src.iter().enumerate() {
        dst[2 * r..2 * r + 2].copy_from_slice(&b[208..210]);
        for k in 0..8 {
            dst[SCALES + 16 * k + 2 * r] = b[192 + 2 * k];
            dst[SCALES + 16 * k + 2 * r + 1] = b[193 + 2 * k];
        }
        for i in 0..16 {
            for bb in 0..4 {
                let q: [u8; 4] = std::array::from_fn(|m| q6_at(b, 16 * i + 4 * m + bb));
                let at = QS + 96 * i + 4 * r + bb;
                dst[at] = (q[0] & 0x0F) | (q[1] << 4);
                dst[at + 32] = (q[2] & 0x0F) | (q[3] << 4);
                dst[at + 64] =
                    (q[0] >> 4) | ((q[1] >> 4) << 2) | ((q[2] >> 4) << 4) | ((q[3] >> 4) << 6);
            }
        }
    }
}

fn reference(w: &[u8], a: &[u8], out: &mut [f32; GROUP_ROWS]) {
    let mut acc = [0.0f32; GROUP_ROWS];
    for (g, y) in w.chunks_exact(GROUP_BYTES).zip(a.chunks_exact(ACT_BLOCK)) {
        let yd = f32::from_le_bytes([y[0], y[1], y[2], y[3]]);
        for r in 0..GROUP_ROWS {
            let mut isum = 0i32;
            for i in 0..16 {
                let sc = g[SCALES + 16 * (i / 2) + 2 * r + i % 2] as i8 as i32;
                let v = &g[QS + 96 * i..QS + 96 * i + 96];
                for b in 0..4 {
                    let h = v[64 + 4 * r + b];
                    for m in 0..4 {
                        let ql = v[32 * (m / 2) + 4 * r + b];
                        let low = if m % 2 == 0 { ql & 0x0F } else { ql >> 4 };
                        let q = (low | (((h >> (2 * m)) & 3) << 4)) as i32 - 32;
                        isum += sc * q * y[4 + 16 * i + 4 * m + b] as i8 as i32;
                    }
                }
            }
            acc[r] = (f16_at(g, 2 * r) * yd).mul_add(isum as f32, acc[r]);
        }
    }
    *out = acc;
}

gemm_over!(
    /// See [`super::GemmFn`] for the contract.
    gemm,
    Packed
);
gemm_over!(
    /// [`gemm`] over unpacked group blocks ([`UNPACKED_BYTES`]).
    gemm_unpacked,
    Loaded
);

/// The kernel body over either form of a group block: the same integer sums and f32
/// operations.
#[inline(always)]
unsafe fn gemm_with<S: QuantSource, const MR: usize>(
    w: *const u8,
    nb: usize,
    a: *const u8,
    a_row: usize,
    y: *mut f32,
    ldy: usize,
) {
    unsafe {
        // pshufb patterns copying i16 lane 2m (even: sub-block 2k) or 2m + 1 (odd: 2k + 1)
        // to both lanes 2m, 2m + 1, the two lanes maddubs fills from row m's quants.
        let dup_even = _mm256_broadcastsi128_si256(_mm_setr_epi8(
            0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13,
        ));
        let dup_odd = _mm256_broadcastsi128_si256(_mm_setr_epi8(
            2, 3, 2, 3, 6, 7, 6, 7, 10, 11, 10, 11, 14, 15, 14, 15,
        ));
        let mut acc = [_mm256_setzero_ps(); MR];
        for ib in 0..nb {
            let g = w.add(ib * S::BYTES);
            // An unpacked block is one group in a small buffer: nothing to fetch ahead.
            if S::IN_MEMORY {
                super::prefetch_next_group(g, nb, S::BYTES);
            }
            let ab = a.add(ib * ACT_BLOCK);
            // Up to 3 rows add their offset terms in this loop; from 4 rows on the offsets
            // take a loop of their own below, so a row's only state here is its i32 sum and
            // up to 8 rows share each sub-block's quants (in this loop, 4 rows' state spilled).
            let mut isum = [_mm256_setzero_si256(); MR];
            let mut off = [_mm256_setzero_si256(); MR];
            for k in 0..8 {
                let sc =
                    _mm256_cvtepi8_epi16(_mm_loadu_si128(g.add(SCALES + 16 * k) as *const __m128i));
                if MR <= 3 {
                    add_offsets(&mut off, sc, ab, a_row, k);
                }
                for (half, dup) in [dup_even, dup_odd].into_iter().enumerate() {
                    let sub = 2 * k + half;
                    let s = _mm256_shuffle_epi8(sc, dup);
                    let q = S::quants(g, sub);
                    for i in 0..MR {
                        let yp = ab.add(i * a_row + 4 + 16 * sub) as *const i32;
                        let y = [0, 1, 2, 3].map(|m| _mm256_set1_epi32(yp.add(m).read_unaligned()));
                        // Quants 0..=63 times activations in -127..=127 (Q8_K caps at 127 and
                        // maps the extreme to -127): a maddubs lane is at most 16002 and two
                        // of them 32004, inside i16; the scale multiply widens to i32.
                        let p01 = _mm256_add_epi16(
                            _mm256_maddubs_epi16(q[0], y[0]),
                            _mm256_maddubs_epi16(q[1], y[1]),
                        );
                        let p23 = _mm256_add_epi16(
                            _mm256_maddubs_epi16(q[2], y[2]),
                            _mm256_maddubs_epi16(q[3], y[3]),
                        );
                        let p =
                            _mm256_add_epi32(_mm256_madd_epi16(p01, s), _mm256_madd_epi16(p23, s));
                        isum[i] = _mm256_add_epi32(isum[i], p);
                    }
                }
            }
            if MR > 3 {
                for k in 0..8 {
                    let sc = _mm256_cvtepi8_epi16(_mm_loadu_si128(
                        g.add(SCALES + 16 * k) as *const __m128i
                    ));
                    add_offsets(&mut off, sc, ab, a_row, k);
                }
            }
            let dx = _mm256_cvtph_ps(_mm_loadu_si128(g as *const __m128i));
            for i in 0..MR {
                // |isum| <= 16 * 128 * 16 * 63 * 127 and |32 off| <= 32 * 16 * 128 * 2032: i32.
                let sum = _mm256_sub_epi32(isum[i], _mm256_slli_epi32(off[i], 5));
                let yd = _mm256_set1_ps((ab.add(i * a_row) as *const f32).read_unaligned());
                acc[i] = _mm256_fmadd_ps(_mm256_mul_ps(dx, yd), _mm256_cvtepi32_ps(sum), acc[i]);
            }
        }
        for i in 0..MR {
            _mm256_storeu_ps(y.add(i * ldy), acc[i]);
        }
    }
}

/// The offset term of scale pair `k` (`sc`: lanes 2r, 2r + 1 are row r's scales of sub-blocks
/// 2k, 2k + 1) against each row's two bsums (each at most 16 * 127 in magnitude).
#[inline(always)]
unsafe fn add_offsets<const MR: usize>(
    off: &mut [__m256i; MR],
    sc: __m256i,
    ab: *const u8,
    a_row: usize,
    k: usize,
) {
    // SAFETY: AVX2 callers only; the rows' activation blocks at `ab` are in bounds.
    unsafe {
        for i in 0..MR {
            let bp = ab.add(i * a_row + BSUMS + 4 * k) as *const i32;
            let bs = _mm256_set1_epi32(bp.read_unaligned());
            off[i] = _mm256_add_epi32(off[i], _mm256_madd_epi16(sc, bs));
        }
    }
}

/// Where the kernel body gets a sub-block's four quant vectors: built from the packed bits, or
/// loaded from an unpacked block. Only called from the AVX2 kernels, on blocks in bounds.
trait QuantSource {
    /// Bytes of one block in this form.
    const BYTES: usize;
    /// The blocks are the packed matrix's, read from memory group after group.
    const IN_MEMORY: bool;
    unsafe fn quants(g: *const u8, sub: usize) -> [__m256i; 4];
}

/// From the packed low nibbles and high bit pairs.
struct Packed;
/// Loaded from an unpacked block.
struct Loaded;

impl QuantSource for Packed {
    const BYTES: usize = GROUP_BYTES;
    const IN_MEMORY: bool = true;

    #[inline(always)]
    unsafe fn quants(g: *const u8, sub: usize) -> [__m256i; 4] {
        // SAFETY: AVX2 callers only; sub-block `sub`'s 96 bytes are inside the group block.
        unsafe {
            let (m4, m30) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(0x30));
            let v = g.add(QS + 96 * sub);
            let ql1 = _mm256_loadu_si256(v as *const __m256i);
            let ql2 = _mm256_loadu_si256(v.add(32) as *const __m256i);
            let qh = _mm256_loadu_si256(v.add(64) as *const __m256i);
            // Each 16-bit shift moves bits by at most 4 within a byte's 0x30 window, so no
            // neighbour byte's bits land in it.
            [
                _mm256_or_si256(
                    _mm256_and_si256(ql1, m4),
                    _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                    _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30),
                ),
                _mm256_or_si256(_mm256_and_si256(ql2, m4), _mm256_and_si256(qh, m30)),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16(ql2, 4), m4),
                    _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30),
                ),
            ]
        }
    }
}

impl QuantSource for Loaded {
    const BYTES: usize = UNPACKED_BYTES;
    const IN_MEMORY: bool = false;

    #[inline(always)]
    unsafe fn quants(g: *const u8, sub: usize) -> [__m256i; 4] {
        // SAFETY: AVX2 callers only; sub-block `sub`'s 128 bytes are inside the unpacked block.
        unsafe {
            let v = g.add(QS + 128 * sub);
            [0, 1, 2, 3].map(|m| _mm256_loadu_si256(v.add(32 * m) as *const __m256i))
        }
    }
}

/// See [`Unpacked::unpack`].
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn unpack(w: *const u8, nb: usize, dst: *mut u8) {
    for ib in 0..nb {
        // SAFETY: per the contract, block ib of `w` and of `dst` are in bounds.
        unsafe {
            let (g, u) = (w.add(ib * GROUP_BYTES), dst.add(ib * UNPACKED_BYTES));
            std::ptr::copy_nonoverlapping(g, u, QS);
            for sub in 0..16 {
                for (m, q) in Packed::quants(g, sub).into_iter().enumerate() {
                    _mm256_storeu_si256(u.add(QS + 128 * sub + 32 * m) as *mut __m256i, q);
                }
            }
        }
    }
}
