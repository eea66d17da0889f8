//! Q5_0 weights (against Q8_0 activations) in group-block layout, 176 bytes per 8 rows' block
//! (the GGUF size): `[0..16)` the rows' f16 `d`; `[16..48)` the 5th bits; then 4 chunks of 32
//! bytes, chunk `c` holding the file's quant bytes `4c..4c + 4` of row `r` in bytes
//! `4r..4r + 4` (low nibbles are elements `4c + b`, high nibbles elements `16 + 4c + b`).
//! The 5th-bit byte `4r + b` holds row r's 5th bit of element `4c + b` at bit `4 + c` and of
//! element `16 + 4c + b` at bit `c` (c = 0..4), so one shift per chunk brings each to 0x10.
//!
//! The quants stay unsigned (0..=31) for maddubs; the `- 16` is applied per block through the
//! activation sum the quantizer stores ([`ACT_BLOCK`]): `(q - 16) . y = q . y - 16 sum(y)`,
//! exact in i32. The f32 operation is `acc = fma(d_x * d_y, isum, acc)`, in the kernel lanes and
//! the reference alike.

#![allow(clippy::needless_range_loop)]

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use super::{GROUP_ROWS, PackedKernels, Unpacked, f16_at, f32_at};

const GROUP_BYTES: usize = 16 + 32 + 4 * 32;
/// Offset of the quant chunks in a group block.
const QS: usize = 48;
/// An activation block: the Q8_0 block's f16 `d` widened to f32, `16 * sum(q)` as i32, then the
/// 32 i8 quants.
pub(super) const ACT_BLOCK: usize = 40;
/// A Q8_0 block as the quantizer writes it: f16 d, 32 i8 quants.
#[cfg(test)]
const Q8_0_BLOCK: usize = 34;

/// The activation layout the long way (tests, the reference of `super::quantize_wide`): the
/// plain Q8_0 quantizer, then its block rewritten into the [`ACT_BLOCK`] layout.
#[cfg(test)]
pub(super) fn quantize_activations_via_q8_0(src: &[f32], dst: &mut [u8]) {
    super::requantize::<Q8_0_BLOCK>(crate::quant::GgmlType::Q8_0, src, dst, ACT_BLOCK, |q, b| {
        let sum: i32 = q[2..].iter().map(|&v| v as i8 as i32).sum();
        b[0..4].copy_from_slice(&f16_at(q, 0).to_le_bytes());
        b[4..8].copy_from_slice(&(16 * sum).to_le_bytes());
        b[8..40].copy_from_slice(&q[2..34]);
    });
}

pub(super) static KERNELS: PackedKernels = PackedKernels {
    group_bytes: GROUP_BYTES,
    pack_group,
    gemm: &[gemm::<1>, gemm::<2>, gemm::<3>, gemm::<4>],
    gemv: None,
    vnni: None,
    max_mr: 4,
    few_rows_mr: None,
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

/// An unpacked group block: the rows' f16 `d`, then per chunk `c` at `16 + 64c` the 32 bytes
/// of elements `4c + b` (`0..=31`, byte `4r + b` for row r) and at `48 + 64c` those of
/// elements `16 + 4c + b`: the `lo` and `hi` vectors [`gemm`] builds for chunk c.
const UNPACKED_BYTES: usize = 16 + 4 * 64;

/// Packs 8 rows' GGUF Q5_0 blocks (`d: f16, qh: u32, qs[16]`; bit j of qh is the 5th bit of
/// element j, ggml-quants.c dequantize_row_q5_0).
fn pack_group(src: [&[u8]; GROUP_ROWS], dst: &mut [u8]) {
    for (r, b) in src.iter().enumerate() {
        dst[2 * r..2 * r + 2].copy_from_slice(&b[0..2]);
        let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
        for i in 0..4 {
            let mut h = 0u8;
            for c in 0..4 {
                h |= (((qh >> (4 * c + i)) & 1) as u8) << (4 + c);
                h |= (((qh >> (16 + 4 * c + i)) & 1) as u8) << c;
            }
            dst[16 + 4 * r + i] = h;
        }
        for c in 0..4 {
            let at = QS + 32 * c + 4 * r;
            dst[at..at + 4].copy_from_slice(&b[6 + 4 * c..10 + 4 * c]);
        }
    }
}

fn reference(w: &[u8], a: &[u8], out: &mut [f32; GROUP_ROWS]) {
    let mut acc = [0.0f32; GROUP_ROWS];
    for (g, y) in w.chunks_exact(GROUP_BYTES).zip(a.chunks_exact(ACT_BLOCK)) {
        let dy = f32_at(y, 0);
        for r in 0..GROUP_ROWS {
            let mut isum = 0i32;
            for c in 0..4 {
                for b in 0..4 {
                    let q = g[QS + 32 * c + 4 * r + b] as i32;
                    let h = g[16 + 4 * r + b] as i32;
                    let lo = (q & 0x0F) + 16 * ((h >> (4 + c)) & 1) - 16;
                    let hi = (q >> 4) + 16 * ((h >> c) & 1) - 16;
                    isum += lo * y[8 + 4 * c + b] as i8 as i32;
                    isum += hi * y[24 + 4 * c + b] as i8 as i32;
                }
            }
            acc[r] = (f16_at(g, 2 * r) * dy).mul_add(isum as f32, acc[r]);
        }
    }
    *out = acc;
}

gemm_over!(
    /// See [`super::GemmFn`] for the contract.
    gemm,
    Chunks
);
gemm_over!(
    /// [`gemm`] over unpacked group blocks ([`UNPACKED_BYTES`]).
    gemm_unpacked,
    Loaded
);

/// The kernel body over either form of a group block: the same integer sums and f32
/// operations.
#[inline(always)]
unsafe fn gemm_with<S: ChunkSource, const MR: usize>(
    w: *const u8,
    nb: usize,
    a: *const u8,
    a_row: usize,
    y: *mut f32,
    ldy: usize,
) {
    unsafe {
        let ones = _mm256_set1_epi16(1);
        let mut acc = [_mm256_setzero_ps(); MR];
        for ib in 0..nb {
            let g = w.add(ib * S::BYTES);
            // An unpacked block is one group in a small buffer: nothing to fetch ahead.
            if S::IN_MEMORY {
                super::prefetch_next_group(g, nb, S::BYTES);
            }
            let ab = a.add(ib * ACT_BLOCK);
            // Quants 0..=31 times Q8_0 activations in -127..=127 (both quantizers scale amax to
            // 127): a maddubs i16 lane is at most 2 * 31 * 127 = 7874, so each i16 sum takes
            // four of them (31496) and two sums (chunks 0-1, 2-3) cover the block.
            let mut s16 = [[_mm256_setzero_si256(); 2]; MR];
            let mut chunks = S::begin(g);
            for c in 0..4 {
                let (lo, hi) = chunks.chunk(g, c);
                for i in 0..MR {
                    let yp = ab.add(i * a_row + 8 + 4 * c) as *const i32;
                    let ylo = _mm256_set1_epi32(yp.read_unaligned());
                    let yhi = _mm256_set1_epi32(yp.add(4).read_unaligned());
                    let p = _mm256_add_epi16(
                        _mm256_maddubs_epi16(lo, ylo),
                        _mm256_maddubs_epi16(hi, yhi),
                    );
                    s16[i][c / 2] = _mm256_add_epi16(s16[i][c / 2], p);
                }
            }
            let dx = _mm256_cvtph_ps(_mm_loadu_si128(g as *const __m128i));
            for i in 0..MR {
                let yb = ab.add(i * a_row);
                let dy = _mm256_set1_ps((yb as *const f32).read_unaligned());
                let ysum16 = _mm256_set1_epi32((yb.add(4) as *const i32).read_unaligned());
                let isum = _mm256_add_epi32(
                    _mm256_madd_epi16(s16[i][0], ones),
                    _mm256_madd_epi16(s16[i][1], ones),
                );
                let isum = _mm256_cvtepi32_ps(_mm256_sub_epi32(isum, ysum16));
                acc[i] = _mm256_fmadd_ps(_mm256_mul_ps(dx, dy), isum, acc[i]);
            }
        }
        for i in 0..MR {
            _mm256_storeu_ps(y.add(i * ldy), acc[i]);
        }
    }
}

/// Where the kernel body gets a block's chunk vectors: built from the packed bits, or loaded
/// from an unpacked block. Only called from the AVX2 kernels, on blocks in bounds.
trait ChunkSource {
    /// Bytes of one block in this form.
    const BYTES: usize;
    /// The blocks are the packed matrix's, read from memory group after group.
    const IN_MEMORY: bool;
    unsafe fn begin(g: *const u8) -> Self;
    /// Chunk `c`'s `lo` and `hi` quant vectors (called in order c = 0, 1, 2, 3).
    unsafe fn chunk(&mut self, g: *const u8, c: usize) -> (__m256i, __m256i);
}

/// Builds a group block's `lo`/`hi` quant vectors chunk by chunk: bit 4 + c of `hl` and bit c of
/// the 5th-bit bytes (bit 4 + c of `hh`) are chunk c's 5th bits, and one right shift per chunk
/// brings the next to bit 4. A 16-bit shift of at most 4 never carries a neighbour byte's bit
/// into bit 4.
struct Chunks {
    hl: __m256i,
    hh: __m256i,
}

impl ChunkSource for Chunks {
    const BYTES: usize = GROUP_BYTES;
    const IN_MEMORY: bool = true;

    #[inline(always)]
    unsafe fn begin(g: *const u8) -> Self {
        // SAFETY: AVX2 callers only; the 5th bits are at 16..48 of the group block.
        unsafe {
            let h = _mm256_loadu_si256(g.add(16) as *const __m256i);
            Self {
                hl: h,
                hh: _mm256_slli_epi16(h, 4),
            }
        }
    }

    #[inline(always)]
    unsafe fn chunk(&mut self, g: *const u8, c: usize) -> (__m256i, __m256i) {
        // SAFETY: AVX2 callers only; chunk c is at QS + 32c..QS + 32c + 32 of the group block.
        unsafe {
            let (m4, m16) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(0x10));
            let q = _mm256_loadu_si256(g.add(QS + 32 * c) as *const __m256i);
            let lo = _mm256_or_si256(_mm256_and_si256(q, m4), _mm256_and_si256(self.hl, m16));
            let hi = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16(q, 4), m4),
                _mm256_and_si256(self.hh, m16),
            );
            self.hl = _mm256_srli_epi16(self.hl, 1);
            self.hh = _mm256_srli_epi16(self.hh, 1);
            (lo, hi)
        }
    }
}

/// Chunks loaded from an unpacked block.
struct Loaded;

impl ChunkSource for Loaded {
    const BYTES: usize = UNPACKED_BYTES;
    const IN_MEMORY: bool = false;

    #[inline(always)]
    unsafe fn begin(_: *const u8) -> Self {
        Loaded
    }

    #[inline(always)]
    unsafe fn chunk(&mut self, g: *const u8, c: usize) -> (__m256i, __m256i) {
        // SAFETY: chunk c's vectors are at 16 + 64c..80 + 64c of the unpacked block.
        unsafe {
            (
                _mm256_loadu_si256(g.add(16 + 64 * c) as *const __m256i),
                _mm256_loadu_si256(g.add(48 + 64 * c) as *const __m256i),
            )
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
            super::prefetch_next_group(g, nb, GROUP_BYTES);
            std::ptr::copy_nonoverlapping(g, u, 16);
            let mut chunks = Chunks::begin(g);
            for c in 0..4 {
                let (lo, hi) = chunks.chunk(g, c);
                _mm256_storeu_si256(u.add(16 + 64 * c) as *mut __m256i, lo);
                _mm256_storeu_si256(u.add(48 + 64 * c) as *mut __m256i, hi);
            }
        }
    }
}
