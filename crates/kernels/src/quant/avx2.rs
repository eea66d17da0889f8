//! AVX2/FMA/F16C dot products of one weight row against `R` activation rows at once (R = 1 for
//! decode; R = 4 lets prompt processing unpack each weight block once for four tokens).
//! Same integer math as the scalar references; the tricks (sign-folding for `maddubs`, Q5_0's
//! high-bit expansion) follow ggml-cpu/arch/x86/quants.c, the code is our own.
//!
//! Every kernel's safety contract: the CPU has AVX2+FMA+F16C; `w` holds `nb` whole weight
//! blocks; `a` holds exactly `R` activation rows of `nb` blocks each; `out.len() == R`. The
//! safe wrappers in `quant/dispatch.rs` check the lengths.

// Kernels walk parallel per-row arrays (accumulators, sums, pointers) by row index.
#![allow(clippy::missing_safety_doc, clippy::needless_range_loop)]

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use super::k_quants::QK_K;

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn u16_at(p: *const u8) -> u32 {
    unsafe { (p as *const u16).read_unaligned() as u32 }
}

/// f16 at `p` (unaligned) to f32 with F16C (for the tails, outside hot block loops).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f16_load(p: *const u8) -> f32 {
    unsafe { _mm_cvtss_f32(f16x2(u16_at(p))) }
}

/// Two f16 (low and high half of `bits`) to lanes 0 and 1. Converting both block scales with
/// one `vmovd` + `vcvtph2ps` matters: converting a lone u16 made LLVM `vpinsrw` into a live
/// accumulator register, chaining every block onto the previous block's FMA (4x slower).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn f16x2(bits: u32) -> __m128 {
    _mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32))
}

/// Product of the f16 scales at `x` and `y`, broadcast to 8 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn f16_product(x: *const u8, y: *const u8) -> __m256 {
    let d = f16x2(unsafe { u16_at(x) | (u16_at(y) << 16) });
    _mm256_broadcastss_ps(_mm_mul_ss(d, _mm_movehdup_ps(d)))
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn f32_load(p: *const u8) -> f32 {
    unsafe { (p as *const f32).read_unaligned() }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn hsum_ps(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn load256(p: *const u8) -> __m256i {
    unsafe { _mm256_loadu_si256(p as *const __m256i) }
}

/// Unsigned i8 x signed i8 pair products summed to 8 x i32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn mul_sum_u8_i8(x: __m256i, y: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(x, y), _mm256_set1_epi16(1))
}

/// 16 bytes of nibbles to 32 bytes: low nibbles first (elems 0..16), high nibbles after.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn nibbles_32(p: *const u8) -> __m256i {
    let lo = unsafe { _mm_loadu_si128(p as *const __m128i) };
    let hi = _mm_srli_epi16(lo, 4);
    _mm256_and_si256(_mm256_set_m128i(hi, lo), _mm256_set1_epi8(0x0F))
}

/// 32 bits at `p` to 32 bytes: 0xFF where the bit is set.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn bits_32(p: *const u8) -> __m256i {
    let x = unsafe { (p as *const u32).read_unaligned() };
    let shuf = _mm256_set_epi64x(
        0x0303030303030303,
        0x0202020202020202,
        0x0101010101010101,
        0,
    );
    let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(x as i32), shuf);
    // Every byte of the mask has all bits but bit (byte index % 8) set.
    let bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1))
}

/// Signed-by-signed block kernel shared by Q4_0, Q5_0 and Q8_0 against Q8_0 activations:
/// `unpack` turns a weight block into 32 signed bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dot_signed_q8_0<const R: usize, const WB: usize>(
    w: &[u8],
    a: &[u8],
    out: &mut [f32],
    unpack: impl Fn(*const u8) -> __m256i,
) {
    const AB: usize = 34;
    let nb = w.len() / WB;
    let stride = nb * AB;
    let (wp, ap) = (w.as_ptr(), a.as_ptr());
    unsafe {
        let mut acc = [_mm256_setzero_ps(); R];
        for ib in 0..nb {
            let xb = wp.add(ib * WB);
            let qx = unpack(xb);
            let ax = _mm256_sign_epi8(qx, qx);
            for (r, acc) in acc.iter_mut().enumerate() {
                let yb = ap.add(r * stride + ib * AB);
                let d = f16_product(xb, yb);
                let sy = _mm256_sign_epi8(load256(yb.add(2)), qx);
                let p = _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sy), _mm256_set1_epi16(1));
                *acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), *acc);
            }
        }
        for r in 0..R {
            out[r] = hsum_ps(acc[r]);
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q8_0<const R: usize>(w: &[u8], a: &[u8], out: &mut [f32]) {
    unsafe { dot_signed_q8_0::<R, 34>(w, a, out, |xb| load256(xb.add(2))) }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q4_0<const R: usize>(w: &[u8], a: &[u8], out: &mut [f32]) {
    unsafe {
        dot_signed_q8_0::<R, 18>(w, a, out, |xb| {
            _mm256_sub_epi8(nibbles_32(xb.add(2)), _mm256_set1_epi8(8))
        })
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q5_0<const R: usize>(w: &[u8], a: &[u8], out: &mut [f32]) {
    unsafe {
        dot_signed_q8_0::<R, 22>(w, a, out, |xb| {
            // Where the 5th bit is clear, set the high nibble: q | 0xF0 == q - 16 as i8.
            let hi = _mm256_andnot_si256(bits_32(xb.add(2)), _mm256_set1_epi8(0xF0u8 as i8));
            _mm256_or_si256(nibbles_32(xb.add(6)), hi)
        })
    }
}

/// Unsigned-weight block kernel shared by Q4_1 and Q5_1 against Q8_1 activations: `unpack`
/// turns a weight block into 32 unsigned bytes; the min term `m_x * s_y` is added per block.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_unsigned_q8_1<const R: usize, const WB: usize>(
    w: &[u8],
    a: &[u8],
    out: &mut [f32],
    unpack: impl Fn(*const u8) -> __m256i,
) {
    const AB: usize = 36;
    let nb = w.len() / WB;
    let stride = nb * AB;
    let (wp, ap) = (w.as_ptr(), a.as_ptr());
    unsafe {
        let mut acc = [_mm256_setzero_ps(); R];
        let mut mins = [0.0f32; R];
        for ib in 0..nb {
            let xb = wp.add(ib * WB);
            let xdm = (xb as *const u32).read_unaligned() as u64;
            let qx = unpack(xb);
            for r in 0..R {
                let yb = ap.add(r * stride + ib * AB);
                // [d_x, m_x, d_y, s_y] in one conversion, then [d_x d_y, m_x s_y].
                let yds = (yb as *const u32).read_unaligned() as u64;
                let v = _mm_cvtph_ps(_mm_cvtsi64_si128((xdm | (yds << 32)) as i64));
                let prod = _mm_mul_ps(v, _mm_movehl_ps(v, v));
                let d = _mm256_broadcastss_ps(prod);
                mins[r] += _mm_cvtss_f32(_mm_movehdup_ps(prod));
                let p = mul_sum_u8_i8(qx, load256(yb.add(4)));
                acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc[r]);
            }
        }
        for r in 0..R {
            out[r] = hsum_ps(acc[r]) + mins[r];
        }
    }
}

/// Q4_1 . Q8_1: unsigned nibbles, plus the min term.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q4_1<const R: usize>(w: &[u8], a: &[u8], out: &mut [f32]) {
    unsafe { dot_unsigned_q8_1::<R, 20>(w, a, out, |xb| nibbles_32(xb.add(4))) }
}

/// Q5_1 . Q8_1: Q4_1 with the 5th bit of each quant from the 32-bit `qh`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q5_1<const R: usize>(w: &[u8], a: &[u8], out: &mut [f32]) {
    unsafe {
        dot_unsigned_q8_1::<R, 24>(w, a, out, |xb| {
            let hi = _mm256_and_si256(bits_32(xb.add(4)), _mm256_set1_epi8(0x10));
            _mm256_or_si256(nibbles_32(xb.add(8)), hi)
        })
    }
}

/// The 12 scale bytes of a Q4_K / Q5_K block at `s`, unpacked into the 8 scales (one byte
/// each, in a u64) and the 8 mins widened to i16 (ggml's utmp trick; equivalent to
/// get_scale_min_k4 for j in 0..8).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn scales_mins_k4(s: *const u8) -> (u64, __m128i) {
    const KMASK1: u32 = 0x3f3f3f3f;
    const KMASK2: u32 = 0x0f0f0f0f;
    const KMASK3: u32 = 0x03030303;
    let s = s as *const u32;
    let (u0, u1, u2) = unsafe {
        (
            s.read_unaligned(),
            s.add(1).read_unaligned(),
            s.add(2).read_unaligned(),
        )
    };
    let sc_lo = u0 & KMASK1;
    let sc_hi = (u2 & KMASK2) | (((u0 >> 6) & KMASK3) << 4);
    let mn_lo = u1 & KMASK1;
    let mn_hi = ((u2 >> 4) & KMASK2) | (((u1 >> 6) & KMASK3) << 4);
    let scales = (sc_lo as u64) | ((sc_hi as u64) << 32);
    let mins = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(
        ((mn_lo as u64) | ((mn_hi as u64) << 32)) as i64,
    ));
    (scales, mins)
}

/// The mins term of a Q4_K / Q5_K block against one Q8_K row: `sum_j m_j (bsum_2j + bsum_2j+1)`
/// as 4 f32 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn mins_term_k4(mins: __m128i, y_block: *const u8) -> __m128 {
    let bsums = unsafe { load256(y_block.add(4 + QK_K)) };
    let sums32 = _mm_hadd_epi16(
        _mm256_castsi256_si128(bsums),
        _mm256_extracti128_si256(bsums, 1),
    );
    _mm_cvtepi32_ps(_mm_madd_epi16(mins, sums32))
}

/// Q4_K . Q8_K. Per 64 elements: 32 weight bytes give two 32-element sub-blocks (low and high
/// nibbles) with their own 6-bit scales; the mins term uses the activations' 16-element sums.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q4_k<const R: usize>(w: &[u8], a: &[u8], out: &mut [f32]) {
    let m4 = _mm256_set1_epi8(0x0F);
    unsafe {
        dot_scale_min_k::<R, 144>(w, a, out, |xb, c| {
            let bits = load256(xb.add(16 + 32 * c));
            (
                _mm256_and_si256(bits, m4),
                _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4),
            )
        })
    }
}

/// Q5_K . Q8_K: Q4_K's scheme, each quant's 5th bit from `qh` (bit `2c` for the low nibbles of
/// 64-element chunk `c`, bit `2c + 1` for the high ones).
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q5_k<const R: usize>(w: &[u8], a: &[u8], out: &mut [f32]) {
    let m4 = _mm256_set1_epi8(0x0F);
    let one = _mm256_set1_epi8(1);
    unsafe {
        dot_scale_min_k::<R, 176>(w, a, out, |xb, c| {
            let bits = load256(xb.add(48 + 32 * c));
            let qh = load256(xb.add(16));
            let h = |k: usize| {
                let b = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(k as i32)), one);
                _mm256_slli_epi16(b, 4)
            };
            (
                _mm256_or_si256(_mm256_and_si256(bits, m4), h(2 * c)),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4),
                    h(2 * c + 1),
                ),
            )
        })
    }
}

/// The kernel Q4_K and Q5_K share: `unpack(block, c)` gives the unsigned quants of 64-element
/// chunk `c` as two 32-byte halves (sub-blocks `2c` and `2c + 1`); the block starts with
/// `d, dmin: f16` and the 12 packed scale bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_scale_min_k<const R: usize, const WB: usize>(
    w: &[u8],
    a: &[u8],
    out: &mut [f32],
    unpack: impl Fn(*const u8, usize) -> (__m256i, __m256i),
) {
    const AB: usize = 292;
    let nb = w.len() / WB;
    let stride = nb * AB;
    let (wp, ap) = (w.as_ptr(), a.as_ptr());
    unsafe {
        let mut acc = [_mm256_setzero_ps(); R];
        for ib in 0..nb {
            let xb = wp.add(ib * WB);
            let dd = f16x2((xb as *const u32).read_unaligned());
            let (dx, dminx) = (_mm_cvtss_f32(dd), _mm_cvtss_f32(_mm_movehdup_ps(dd)));
            let (scales, mins) = scales_mins_k4(xb.add(4));
            let mut sumi = [_mm256_setzero_si256(); R];
            for c in 0..4 {
                let (lo, hi) = unpack(xb, c);
                let s_lo = _mm256_set1_epi16(((scales >> (16 * c)) & 0xFF) as i16);
                let s_hi = _mm256_set1_epi16(((scales >> (16 * c + 8)) & 0xFF) as i16);
                for r in 0..R {
                    let yq = ap.add(r * stride + ib * AB + 4 + 64 * c);
                    let p_lo = _mm256_madd_epi16(s_lo, _mm256_maddubs_epi16(lo, load256(yq)));
                    let p_hi =
                        _mm256_madd_epi16(s_hi, _mm256_maddubs_epi16(hi, load256(yq.add(32))));
                    sumi[r] = _mm256_add_epi32(sumi[r], _mm256_add_epi32(p_lo, p_hi));
                }
            }
            for r in 0..R {
                let yb = ap.add(r * stride + ib * AB);
                let yd = f32_load(yb);
                let m = mins_term_k4(mins, yb);
                acc[r] =
                    _mm256_fmadd_ps(_mm256_set1_ps(yd * dx), _mm256_cvtepi32_ps(sumi[r]), acc[r]);
                acc[r] = _mm256_fmadd_ps(
                    _mm256_set1_ps(-yd * dminx),
                    _mm256_zextps128_ps256(m),
                    acc[r],
                );
            }
        }
        for r in 0..R {
            out[r] = hsum_ps(acc[r]);
        }
    }
}

/// Shuffle mask picking byte `i` into the low 8 lanes and byte `i + 1` into the high 8.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn pair_mask(i: usize) -> __m128i {
    const ONES: i64 = 0x0101010101010101;
    _mm_set_epi64x((i as i64 + 1) * ONES, i as i64 * ONES)
}

/// Q6_K . Q8_K. Each 128-element half: ql (64 B) and qh (32 B) rebuild four 32-element groups
/// of 6-bit unsigned quants; the `- 32` offset is applied once per block through the
/// activations' 16-element sums: sum sc (q - 32) y = sum sc q y - 32 sum sc bsum.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q6_k<const R: usize>(w: &[u8], a: &[u8], out: &mut [f32]) {
    const WB: usize = 210;
    const AB: usize = 292;
    let nb = w.len() / WB;
    let stride = nb * AB;
    let (wp, ap) = (w.as_ptr(), a.as_ptr());
    let m4 = _mm256_set1_epi8(0x0F);
    let m3 = _mm256_set1_epi8(0x03);
    unsafe {
        let mut acc = [_mm256_setzero_ps(); R];
        for ib in 0..nb {
            let xb = wp.add(ib * WB);
            let dx = _mm_cvtss_f32(f16x2(u16_at(xb.add(208))));
            let sc8 = _mm_loadu_si128(xb.add(192) as *const __m128i);
            let mut sumi = [_mm256_setzero_si256(); R];
            // The offset term first: -32 * sum_i sc_i bsum_i.
            let sc16 = _mm256_cvtepi8_epi16(sc8);
            for r in 0..R {
                let bsums = load256(ap.add(r * stride + ib * AB + 4 + QK_K));
                let off = _mm256_slli_epi32(_mm256_madd_epi16(sc16, bsums), 5);
                sumi[r] = _mm256_sub_epi32(sumi[r], off);
            }
            for h in 0..2 {
                let bits1 = load256(xb.add(64 * h));
                let bits2 = load256(xb.add(64 * h + 32));
                let bits_h = load256(xb.add(128 + 32 * h));
                for k in 0..4 {
                    let (low, src) = match k {
                        0 => (_mm256_and_si256(bits1, m4), bits_h),
                        1 => (_mm256_and_si256(bits2, m4), _mm256_srli_epi16(bits_h, 2)),
                        2 => (
                            _mm256_and_si256(_mm256_srli_epi16(bits1, 4), m4),
                            _mm256_srli_epi16(bits_h, 4),
                        ),
                        _ => (
                            _mm256_and_si256(_mm256_srli_epi16(bits2, 4), m4),
                            _mm256_srli_epi16(bits_h, 6),
                        ),
                    };
                    let q = _mm256_or_si256(low, _mm256_slli_epi16(_mm256_and_si256(src, m3), 4));
                    let sc = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8, pair_mask(8 * h + 2 * k)));
                    for r in 0..R {
                        let y = load256(ap.add(r * stride + ib * AB + 4 + 128 * h + 32 * k));
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

/// Float weights (F32, F16, BF16; `load8` widens 8 elements at a byte pointer) against f32
/// activations, 8 lanes at a time with a scalar tail.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_float<const R: usize, const WE: usize>(
    w: &[u8],
    a: &[u8],
    out: &mut [f32],
    load8: impl Fn(*const u8) -> __m256,
    load1: impl Fn(*const u8) -> f32,
) {
    let n = w.len() / WE;
    let stride = n * 4;
    let (wp, ap) = (w.as_ptr(), a.as_ptr());
    unsafe {
        let mut acc = [_mm256_setzero_ps(); R];
        let n8 = n / 8 * 8;
        for i in (0..n8).step_by(8) {
            let x = load8(wp.add(i * WE));
            for r in 0..R {
                let y = _mm256_loadu_ps(ap.add(r * stride + 4 * i) as *const f32);
                acc[r] = _mm256_fmadd_ps(x, y, acc[r]);
            }
        }
        for r in 0..R {
            let mut s = hsum_ps(acc[r]);
            for i in n8..n {
                s += load1(wp.add(i * WE)) * f32_load(ap.add(r * stride + 4 * i));
            }
            out[r] = s;
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_f32<const R: usize>(w: &[u8], a: &[u8], out: &mut [f32]) {
    unsafe {
        dot_float::<R, 4>(
            w,
            a,
            out,
            |p| _mm256_loadu_ps(p as *const f32),
            |p| f32_load(p),
        )
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_f16<const R: usize>(w: &[u8], a: &[u8], out: &mut [f32]) {
    unsafe {
        dot_float::<R, 2>(
            w,
            a,
            out,
            |p| _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i)),
            |p| f16_load(p),
        )
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_bf16<const R: usize>(w: &[u8], a: &[u8], out: &mut [f32]) {
    unsafe {
        dot_float::<R, 2>(
            w,
            a,
            out,
            |p| {
                let h = _mm256_cvtepu16_epi32(_mm_loadu_si128(p as *const __m128i));
                _mm256_castsi256_ps(_mm256_slli_epi32(h, 16))
            },
            |p| f32::from_bits(((p as *const u16).read_unaligned() as u32) << 16),
        )
    }
}

/// 32 activations at `x` to i8 with ggml-cpu's x86 Q8 rounding (`id = 127 / amax`, round half
/// to even): returns (amax, the 32 quants in order, their 8-lane i32 partial sums). Bit-exact
/// with `legacy::quantize_act_q8_0`: the same f32 multiply and rounding.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn quantize_32(x: *const f32) -> (f32, __m256i, __m256i) {
    let v = unsafe {
        [
            _mm256_loadu_ps(x),
            _mm256_loadu_ps(x.add(8)),
            _mm256_loadu_ps(x.add(16)),
            _mm256_loadu_ps(x.add(24)),
        ]
    };
    let sign = _mm256_set1_ps(-0.0);
    let m = _mm256_max_ps(
        _mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
        _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])),
    );
    let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    let amax = _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
    let id = _mm256_set1_ps(if amax != 0.0 { 127.0 / amax } else { 0.0 });
    let q = v.map(|v| {
        _mm256_cvtps_epi32(_mm256_round_ps(
            _mm256_mul_ps(v, id),
            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC,
        ))
    });
    let sums = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
    // packs work within 128-bit lanes; the permute restores element order.
    let p = _mm256_packs_epi16(
        _mm256_packs_epi32(q[0], q[1]),
        _mm256_packs_epi32(q[2], q[3]),
    );
    let p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    (amax, p, sums)
}

/// AVX2 Q8_0 activation quantizer. Contract: `src.len() % 32 == 0`, `dst.len() == src.len()
/// / 32 * 34`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn quantize_act_q8_0(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(32).zip(dst.chunks_exact_mut(34)) {
        let (amax, q, _) = unsafe { quantize_32(x.as_ptr()) };
        b[0..2].copy_from_slice(&half::f16::from_f32(amax / 127.0).to_le_bytes());
        unsafe { _mm256_storeu_si256(b.as_mut_ptr().add(2) as *mut __m256i, q) };
    }
}

/// Sum of the 8 i32 lanes of `v`.
#[inline]
#[target_feature(enable = "avx2")]
fn hsum_epi32(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01_00_11_10));
    _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, 0b10_11_00_01)))
}

/// `x` rounded to f16 (to nearest even, as `half::f16::from_f32` and ggml store block scales)
/// and widened back.
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn through_f16(x: f32) -> f32 {
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(
        _mm_set_ss(x),
    )))
}

/// Q8_1 quantization straight into the packed Q4_1 kernels' 72-byte activation blocks: `d` and
/// `s = d * sum(q)` rounded through f16 exactly as [`quantize_act_q8_1`] stores them, widened
/// to f32, then the 32 quants twice (the kernels read 32 bytes from any of the first 8 runs of 4).
/// Contract: `src.len() % 32 == 0`, `dst.len() == src.len() / 32 * 72`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn quantize_act_q8_1_wide(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(32).zip(dst.chunks_exact_mut(72)) {
        let (amax, q, sums) = unsafe { quantize_32(x.as_ptr()) };
        let d = amax / 127.0;
        b[0..4].copy_from_slice(&through_f16(d).to_le_bytes());
        b[4..8].copy_from_slice(&through_f16(d * hsum_epi32(sums) as f32).to_le_bytes());
        let at = b.as_mut_ptr();
        unsafe {
            _mm256_storeu_si256(at.add(8) as *mut __m256i, q);
            _mm256_storeu_si256(at.add(40) as *mut __m256i, q);
        }
    }
}

/// Q8_0 quantization straight into the packed Q5_0 kernels' 40-byte activation blocks: `d`
/// rounded through f16 as [`quantize_act_q8_0`] stores it, widened to f32; `16 * sum(q)` as
/// i32; the 32 quants. Contract: `src.len() % 32 == 0`, `dst.len() == src.len() / 32 * 40`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn quantize_act_q8_0_wide(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(32).zip(dst.chunks_exact_mut(40)) {
        let (amax, q, sums) = unsafe { quantize_32(x.as_ptr()) };
        b[0..4].copy_from_slice(&through_f16(amax / 127.0).to_le_bytes());
        b[4..8].copy_from_slice(&(16 * hsum_epi32(sums)).to_le_bytes());
        unsafe { _mm256_storeu_si256(b.as_mut_ptr().add(8) as *mut __m256i, q) };
    }
}

/// AVX2 Q8_1 activation quantizer: as Q8_0 plus `s = d * sum(q)`. Same contract, 36-byte blocks.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn quantize_act_q8_1(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(32).zip(dst.chunks_exact_mut(36)) {
        let (amax, q, sums) = unsafe { quantize_32(x.as_ptr()) };
        let s = _mm_add_epi32(
            _mm256_castsi256_si128(sums),
            _mm256_extracti128_si256(sums, 1),
        );
        let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01_00_11_10));
        let s = _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, 0b10_11_00_01)));
        let d = amax / 127.0;
        b[0..2].copy_from_slice(&half::f16::from_f32(d).to_le_bytes());
        b[2..4].copy_from_slice(&half::f16::from_f32(d * s as f32).to_le_bytes());
        unsafe { _mm256_storeu_si256(b.as_mut_ptr().add(4) as *mut __m256i, q) };
    }
}

/// AVX2 Q8_K quantizer, bit-exact with `k_quants::quantize_q8_k` (quantize_row_q8_K_ref):
/// the first element of largest |x| maps to -127, `q = round_half_even(x * iscale)`.
/// Contract: `src.len() % 256 == 0`, `dst.len() == src.len() / 256 * 292`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn quantize_q8_k(src: &[f32], dst: &mut [u8]) {
    let sign = _mm256_set1_ps(-0.0);
    for (x, b) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(292)) {
        let xp = x.as_ptr();
        let mut m = _mm256_setzero_ps();
        for i in 0..32 {
            let v = unsafe { _mm256_loadu_ps(xp.add(8 * i)) };
            m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v));
        }
        let m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        let m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        let amax = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
        if amax == 0.0 {
            b.fill(0);
            continue;
        }
        // The reference keeps the sign of the first element reaching amax.
        let am = _mm256_set1_ps(amax);
        let mut max = amax;
        for i in 0..32 {
            let v = unsafe { _mm256_loadu_ps(xp.add(8 * i)) };
            let hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign, v), am, _CMP_EQ_OQ));
            if hit != 0 {
                max = x[8 * i + hit.trailing_zeros() as usize];
                break;
            }
        }
        let iscale = -127.0 / max;
        let is = _mm256_set1_ps(iscale);
        let cap = _mm256_set1_epi32(127);
        let qp = unsafe { b.as_mut_ptr().add(4) };
        for g in 0..8 {
            let q = [0, 1, 2, 3].map(|j| {
                let v = unsafe { _mm256_loadu_ps(xp.add(32 * g + 8 * j)) };
                let r = _mm256_round_ps(
                    _mm256_mul_ps(v, is),
                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC,
                );
                _mm256_min_epi32(_mm256_cvtps_epi32(r), cap)
            });
            let p = _mm256_packs_epi16(
                _mm256_packs_epi32(q[0], q[1]),
                _mm256_packs_epi32(q[2], q[3]),
            );
            let p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            unsafe { _mm256_storeu_si256(qp.add(32 * g) as *mut __m256i, p) };
            // Block sums of 16: elements 32g..32g+16 are q[0] + q[1], the next 16 q[2] + q[3].
            for (h, pair) in [(0, (q[0], q[1])), (1, (q[2], q[3]))] {
                let s = _mm256_add_epi32(pair.0, pair.1);
                let s = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
                let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01_00_11_10));
                let s = _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, 0b10_11_00_01)));
                let at = 260 + 2 * (2 * g + h);
                b[at..at + 2].copy_from_slice(&(s as i16).to_le_bytes());
            }
        }
        b[0..4].copy_from_slice(&(1.0 / iscale).to_le_bytes());
    }
}
