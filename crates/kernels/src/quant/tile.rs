//! AVX2 register tiles for the 32-element block formats (Q4_0, Q4_1, Q5_0, Q8_0 weights against
//! Q8_0/Q8_1 activations): one call dots `MR` activation rows with `NR` weight rows, so each
//! weight block is unpacked once for `MR` rows and each activation block is loaded once per `NR`.
//!
//! Every (activation row, weight row) pair is accumulated exactly as the one-row kernels of
//! `quant/avx2.rs` do it (an 8-lane f32 accumulator, one `fmadd(d_x * d_y, block dot)` per block,
//! Q4_1's min term summed separately, the same final horizontal sum), so a result is
//! bit-identical whatever tile shape, batch size or thread split computes it.
//!
//! Activation block scales come pre-converted to f32 (see [`ActScales`]), stored block-major so
//! that the scales of consecutive activation rows sit next to each other.

// Kernels walk parallel per-row/per-column arrays by index.
#![allow(clippy::needless_range_loop)]

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

// Shared with the one-row kernels: the same reduction and unpacking is what keeps results
// bit-identical between the two paths.
use super::avx2::{bits_32, hsum_ps, load256, nibbles_32};

/// The activation-side operands of a tile call. Safety contract of every kernel here: the CPU
/// has AVX2+FMA+F16C; `a` points at `MR` activation rows `a_stride` bytes apart, each holding
/// `nb` blocks; `d` (and `s` for Q4_1) point at this tile's first row's scale of block 0, with
/// block `ib` of row `i` at `d[ib * ld + i]`; `w` points at `NR` weight rows `w_stride` bytes
/// apart of `nb` blocks each; `out[i * ldo + j]` is writable for `i < MR`, `j < NR`.
#[derive(Clone, Copy)]
pub(crate) struct ActScales {
    /// `d` of each block, f32.
    pub d: *const f32,
    /// `s = d * sum(q)` of each block, f32 (Q8_1 only; unused for Q8_0).
    pub s: *const f32,
    /// Floats between the scales of one block and the next.
    pub ld: usize,
}

/// Bytes of each weight block type, and of the Q8_0 / Q8_1 activation blocks.
const Q8_0_BYTES: usize = 34;
const Q8_1_BYTES: usize = 36;

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn u32_at(p: *const u8) -> i32 {
    unsafe { (p as *const u32).read_unaligned() as i32 }
}

/// Up to four 32-bit words, one per weight row, converted from f16 pairs to 8 f32 lanes:
/// `[lo0, hi0, lo1, hi1, ...]`. For the signed formats only the low half (d) is meaningful.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn weight_scales<const NR: usize>(w: *const u8, w_stride: usize, at: usize) -> __m256 {
    let mut words = [0i32; 4];
    for j in 0..NR {
        words[j] = unsafe { u32_at(w.add(j * w_stride + at)) };
    }
    _mm256_cvtph_ps(_mm_setr_epi32(words[0], words[1], words[2], words[3]))
}

/// Lane `l` of `v` in every lane.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn lane(v: __m256, l: i32) -> __m256 {
    _mm256_permutevar8x32_ps(v, _mm256_set1_epi32(l))
}

/// Signed weights (Q4_0, Q5_0, Q8_0; `unpack` gives a block's 32 signed quants, `WB` bytes a
/// block, the f16 d at offset 0) against Q8_0 activations.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
unsafe fn tile_signed<const MR: usize, const NR: usize, const WB: usize>(
    w: *const u8,
    w_stride: usize,
    a: *const u8,
    a_stride: usize,
    sc: ActScales,
    nb: usize,
    out: *mut f32,
    ldo: usize,
    unpack: impl Fn(*const u8) -> __m256i,
) {
    let ones = _mm256_set1_epi16(1);
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); NR]; MR];
        for ib in 0..nb {
            let wb = ib * WB;
            // The d words are u16; reading 4 bytes picks up the next field's low half, which
            // lands in the odd lanes and is never used.
            let dw = weight_scales::<NR>(w, w_stride, wb);
            let mut qx = [_mm256_setzero_si256(); NR];
            let mut ax = [_mm256_setzero_si256(); NR];
            for j in 0..NR {
                qx[j] = unpack(w.add(j * w_stride + wb));
                ax[j] = _mm256_sign_epi8(qx[j], qx[j]);
            }
            let ab = ib * Q8_0_BYTES;
            for i in 0..MR {
                let dy = _mm256_broadcast_ss(&*sc.d.add(ib * sc.ld + i));
                let y = load256(a.add(i * a_stride + ab + 2));
                for j in 0..NR {
                    let d = _mm256_mul_ps(lane(dw, 2 * j as i32), dy);
                    let sy = _mm256_sign_epi8(y, qx[j]);
                    let p = _mm256_madd_epi16(_mm256_maddubs_epi16(ax[j], sy), ones);
                    acc[i][j] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc[i][j]);
                }
            }
        }
        for i in 0..MR {
            for j in 0..NR {
                *out.add(i * ldo + j) = hsum_ps(acc[i][j]);
            }
        }
    }
}

/// Q4_1 weights against Q8_1 activations: unsigned nibbles, plus the min term `m_x * s_y`
/// summed per pair in lane `i * NR + j` of one vector (so `MR * NR <= 8`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
unsafe fn tile_q4_1<const MR: usize, const NR: usize>(
    w: *const u8,
    w_stride: usize,
    a: *const u8,
    a_stride: usize,
    sc: ActScales,
    nb: usize,
    out: *mut f32,
    ldo: usize,
) {
    const WB: usize = 20;
    debug_assert!(MR * NR <= 8);
    let ones = _mm256_set1_epi16(1);
    // Lane i * NR + j of the min-term vectors reads m_x of weight row j (lane 2j + 1 of the
    // converted scales) and s_y of activation row i.
    let mut m_idx = [0i32; 8];
    let mut s_idx = [0i32; 8];
    for l in 0..MR * NR {
        m_idx[l] = 2 * (l % NR) as i32 + 1;
        s_idx[l] = (l / NR) as i32;
    }
    let m_idx = unsafe { _mm256_loadu_si256(m_idx.as_ptr() as *const __m256i) };
    let s_idx = unsafe { _mm256_loadu_si256(s_idx.as_ptr() as *const __m256i) };
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); NR]; MR];
        let mut mins = _mm256_setzero_ps();
        for ib in 0..nb {
            let wb = ib * WB;
            let dm = weight_scales::<NR>(w, w_stride, wb);
            let mut qx = [_mm256_setzero_si256(); NR];
            for j in 0..NR {
                qx[j] = nibbles_32(w.add(j * w_stride + wb + 4));
            }
            let ab = ib * Q8_1_BYTES;
            for i in 0..MR {
                let dy = _mm256_broadcast_ss(&*sc.d.add(ib * sc.ld + i));
                let y = load256(a.add(i * a_stride + ab + 4));
                for j in 0..NR {
                    let d = _mm256_mul_ps(lane(dm, 2 * j as i32), dy);
                    let p = _mm256_madd_epi16(_mm256_maddubs_epi16(qx[j], y), ones);
                    acc[i][j] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc[i][j]);
                }
            }
            // Four s_y of consecutive rows; lanes past MR are never read by s_idx.
            let sy = if MR == 1 {
                _mm256_castps128_ps256(_mm_load_ss(sc.s.add(ib * sc.ld)))
            } else {
                let mut s4 = [0.0f32; 4];
                for i in 0..MR {
                    s4[i] = *sc.s.add(ib * sc.ld + i);
                }
                _mm256_castps128_ps256(_mm_loadu_ps(s4.as_ptr()))
            };
            let m = _mm256_mul_ps(
                _mm256_permutevar8x32_ps(dm, m_idx),
                _mm256_permutevar8x32_ps(sy, s_idx),
            );
            mins = _mm256_add_ps(mins, m);
        }
        let mut mins_l = [0.0f32; 8];
        _mm256_storeu_ps(mins_l.as_mut_ptr(), mins);
        for i in 0..MR {
            for j in 0..NR {
                *out.add(i * ldo + j) = hsum_ps(acc[i][j]) + mins_l[i * NR + j];
            }
        }
    }
}

/// A tile kernel: `(w, w_stride, a, a_stride, scales, nb, out, ldo)`, see [`ActScales`].
pub(crate) type TileFn =
    unsafe fn(*const u8, usize, *const u8, usize, ActScales, usize, *mut f32, usize);

macro_rules! signed_kernel {
    ($name:ident, $wb:literal, $unpack:expr) => {
        #[target_feature(enable = "avx2,fma,f16c")]
        #[allow(clippy::too_many_arguments)]
        unsafe fn $name<const MR: usize, const NR: usize>(
            w: *const u8,
            w_stride: usize,
            a: *const u8,
            a_stride: usize,
            sc: ActScales,
            nb: usize,
            out: *mut f32,
            ldo: usize,
        ) {
            unsafe {
                tile_signed::<MR, NR, $wb>(w, w_stride, a, a_stride, sc, nb, out, ldo, $unpack)
            }
        }
    };
}

signed_kernel!(tile_q8_0, 34, |xb| load256(xb.add(2)));
signed_kernel!(tile_q4_0, 18, |xb| _mm256_sub_epi8(
    nibbles_32(xb.add(2)),
    _mm256_set1_epi8(8)
));
signed_kernel!(tile_q5_0, 22, |xb| {
    // Where the 5th bit is clear, set the high nibble: q | 0xF0 == q - 16 as i8.
    let hi = _mm256_andnot_si256(bits_32(xb.add(2)), _mm256_set1_epi8(0xF0u8 as i8));
    _mm256_or_si256(nibbles_32(xb.add(6)), hi)
});

#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
unsafe fn tile_q4_1_k<const MR: usize, const NR: usize>(
    w: *const u8,
    w_stride: usize,
    a: *const u8,
    a_stride: usize,
    sc: ActScales,
    nb: usize,
    out: *mut f32,
    ldo: usize,
) {
    unsafe { tile_q4_1::<MR, NR>(w, w_stride, a, a_stride, sc, nb, out, ldo) }
}

/// Largest activation rows (`MR`) and weight rows (`NR`) of a tile.
pub(crate) const MAX_MR: usize = 4;
pub(crate) const MAX_NR: usize = 4;

/// The tile kernels of one weight type, indexed `[mr - 1][nr - 1]`; `None` where `mr * nr > 8`.
pub(crate) type TileTable = [[Option<TileFn>; MAX_NR]; MAX_MR];

macro_rules! table {
    ($k:ident) => {{
        let mut t: TileTable = [[None; MAX_NR]; MAX_MR];
        t[0] = [
            Some($k::<1, 1> as TileFn),
            Some($k::<1, 2>),
            Some($k::<1, 3>),
            Some($k::<1, 4>),
        ];
        t[1] = [
            Some($k::<2, 1> as TileFn),
            Some($k::<2, 2>),
            Some($k::<2, 3>),
            Some($k::<2, 4>),
        ];
        t[2] = [Some($k::<3, 1> as TileFn), Some($k::<3, 2>), None, None];
        t[3] = [Some($k::<4, 1> as TileFn), Some($k::<4, 2>), None, None];
        t
    }};
}

/// The AVX2 tile table for weight type id `ty` (Q4_0, Q4_1, Q5_0, Q8_0), `None` otherwise.
/// Only to be used when the CPU has AVX2+FMA+F16C.
pub(crate) fn tiles(ty: super::GgmlType) -> Option<&'static TileTable> {
    use super::GgmlType as T;
    use std::sync::OnceLock;
    static Q4_0: OnceLock<TileTable> = OnceLock::new();
    static Q4_1: OnceLock<TileTable> = OnceLock::new();
    static Q5_0: OnceLock<TileTable> = OnceLock::new();
    static Q8_0: OnceLock<TileTable> = OnceLock::new();
    Some(match ty {
        T::Q4_0 => Q4_0.get_or_init(|| table!(tile_q4_0)),
        T::Q4_1 => Q4_1.get_or_init(|| table!(tile_q4_1_k)),
        T::Q5_0 => Q5_0.get_or_init(|| table!(tile_q5_0)),
        T::Q8_0 => Q8_0.get_or_init(|| table!(tile_q8_0)),
        _ => return None,
    })
}
