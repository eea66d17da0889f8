//! The 32-element "legacy" block formats Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and Q8_1: dequantization,
//! ggml's reference quantizers (`quantize_row_*_ref` in ggml-quants.c), the activation quantizers
//! ggml-cpu runs on x86 (for logit parity), and scalar reference dot products.
//!
//! Every row slice here is a whole number of blocks; callers in `quant/mod.rs` check lengths.

use half::f16;

/// Elements per block of every format in this file.
pub(crate) const QK: usize = 32;

/// Reads the little-endian f16 at `b[0..2]` as f32.
#[inline(always)]
pub(crate) fn f16_at(b: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

#[inline(always)]
fn put_f16(b: &mut [u8], at: usize, v: f32) {
    b[at..at + 2].copy_from_slice(&f16::from_f32(v).to_le_bytes());
}

/// Largest |x| and the signed value that has it (ggml keeps the sign so the extreme maps to -8
/// or -16 exactly, see quantize_row_q4_0_ref).
fn abs_max_signed(x: &[f32]) -> (f32, f32) {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    (amax, max)
}

// ---------------------------------------------------------------- dequantization

/// Q4_0 block: `d: f16, qs[16]`; elem j is the low nibble of qs[j], elem j+16 the high one.
pub(crate) fn dequantize_q4_0(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(18).zip(dst.chunks_exact_mut(QK)) {
        let d = f16_at(b, 0);
        for j in 0..16 {
            let q = b[2 + j];
            y[j] = ((q & 0x0F) as i32 - 8) as f32 * d;
            y[j + 16] = ((q >> 4) as i32 - 8) as f32 * d;
        }
    }
}

/// Q4_1 block: `d: f16, m: f16, qs[16]`; value q * d + m.
pub(crate) fn dequantize_q4_1(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(20).zip(dst.chunks_exact_mut(QK)) {
        let (d, m) = (f16_at(b, 0), f16_at(b, 2));
        for j in 0..16 {
            let q = b[4 + j];
            y[j] = (q & 0x0F) as f32 * d + m;
            y[j + 16] = (q >> 4) as f32 * d + m;
        }
    }
}

/// Q5_0 block: `d: f16, qh: u32, qs[16]`; bit j of qh is the 5th bit of elem j.
pub(crate) fn dequantize_q5_0(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(22).zip(dst.chunks_exact_mut(QK)) {
        let d = f16_at(b, 0);
        let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
        for j in 0..16 {
            let q = b[6 + j];
            let h0 = ((qh >> j) & 1) << 4;
            let h1 = ((qh >> (j + 16)) & 1) << 4;
            y[j] = (((q & 0x0F) as u32 | h0) as i32 - 16) as f32 * d;
            y[j + 16] = (((q >> 4) as u32 | h1) as i32 - 16) as f32 * d;
        }
    }
}

/// Q5_1 block: `d: f16, m: f16, qh: u32, qs[16]`; value `q * d + m` with q in 0..32.
pub(crate) fn dequantize_q5_1(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(24).zip(dst.chunks_exact_mut(QK)) {
        let (d, m) = (f16_at(b, 0), f16_at(b, 2));
        let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        for j in 0..16 {
            let q = b[8 + j];
            let h0 = ((qh >> j) & 1) << 4;
            let h1 = ((qh >> (j + 16)) & 1) << 4;
            y[j] = ((q & 0x0F) as u32 | h0) as f32 * d + m;
            y[j + 16] = ((q >> 4) as u32 | h1) as f32 * d + m;
        }
    }
}

/// Q8_0 block: `d: f16, qs: i8[32]`.
pub(crate) fn dequantize_q8_0(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(34).zip(dst.chunks_exact_mut(QK)) {
        let d = f16_at(b, 0);
        for j in 0..QK {
            y[j] = b[2 + j] as i8 as f32 * d;
        }
    }
}

/// Q8_1 block: `d: f16, s: f16, qs: i8[32]`; `s` (d times the sum of qs) is not needed here.
pub(crate) fn dequantize_q8_1(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(36).zip(dst.chunks_exact_mut(QK)) {
        let d = f16_at(b, 0);
        for j in 0..QK {
            y[j] = b[4 + j] as i8 as f32 * d;
        }
    }
}

// ---------------------------------------------------------------- reference quantizers

/// ggml quantize_row_q4_0_ref: the signed extreme maps to -8; `(int8)(x*id + 8.5)` truncates.
pub(crate) fn quantize_q4_0(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(18)) {
        let (_, max) = abs_max_signed(x);
        let d = max / -8.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        put_f16(b, 0, d);
        for j in 0..16 {
            let x0 = ((x[j] * id + 8.5) as i8).min(15) as u8;
            let x1 = ((x[j + 16] * id + 8.5) as i8).min(15) as u8;
            b[2 + j] = x0 | (x1 << 4);
        }
    }
}

/// ggml quantize_row_q4_1_ref: d = (max - min) / 15, m = min.
pub(crate) fn quantize_q4_1(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(20)) {
        let min = x.iter().copied().fold(f32::MAX, f32::min);
        let max = x.iter().copied().fold(f32::MIN, f32::max);
        let d = (max - min) / 15.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        put_f16(b, 0, d);
        put_f16(b, 2, min);
        for j in 0..16 {
            let x0 = (((x[j] - min) * id + 0.5) as i8).min(15) as u8;
            let x1 = (((x[j + 16] - min) * id + 0.5) as i8).min(15) as u8;
            b[4 + j] = x0 | (x1 << 4);
        }
    }
}

/// ggml quantize_row_q5_0_ref: the signed extreme maps to -16.
pub(crate) fn quantize_q5_0(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(22)) {
        let (_, max) = abs_max_signed(x);
        let d = max / -16.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        put_f16(b, 0, d);
        let mut qh = 0u32;
        for j in 0..16 {
            let x0 = ((x[j] * id + 16.5) as i8).min(31) as u8;
            let x1 = ((x[j + 16] * id + 16.5) as i8).min(31) as u8;
            b[6 + j] = (x0 & 0x0F) | ((x1 & 0x0F) << 4);
            qh |= (((x0 & 0x10) >> 4) as u32) << j;
            qh |= (((x1 & 0x10) >> 4) as u32) << (j + 16);
        }
        b[2..6].copy_from_slice(&qh.to_le_bytes());
    }
}

/// ggml quantize_row_q5_1_ref: d = (max - min) / 31, m = min.
pub(crate) fn quantize_q5_1(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(24)) {
        let min = x.iter().copied().fold(f32::MAX, f32::min);
        let max = x.iter().copied().fold(f32::MIN, f32::max);
        let d = (max - min) / 31.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        put_f16(b, 0, d);
        put_f16(b, 2, min);
        let mut qh = 0u32;
        for j in 0..16 {
            let x0 = (((x[j] - min) * id + 0.5) as u8).min(31);
            let x1 = (((x[j + 16] - min) * id + 0.5) as u8).min(31);
            b[8 + j] = (x0 & 0x0F) | ((x1 & 0x0F) << 4);
            qh |= ((x0 >> 4) as u32) << j;
            qh |= ((x1 >> 4) as u32) << (j + 16);
        }
        b[4..8].copy_from_slice(&qh.to_le_bytes());
    }
}

/// ggml quantize_row_q8_0_ref: d = amax / 127, `roundf` (ties away from zero).
pub(crate) fn quantize_q8_0(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(34)) {
        let (amax, _) = abs_max_signed(x);
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        put_f16(b, 0, d);
        for j in 0..QK {
            b[2 + j] = (x[j] * id).round() as i8 as u8;
        }
    }
}

/// ggml quantize_row_q8_1_ref: like Q8_0 plus `s = d * sum(qs)`.
pub(crate) fn quantize_q8_1(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(36)) {
        let (amax, _) = abs_max_signed(x);
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut sum = 0i32;
        for j in 0..QK {
            let q = (x[j] * id).round() as i8;
            sum += q as i32;
            b[4 + j] = q as u8;
        }
        put_f16(b, 0, d);
        put_f16(b, 2, sum as f32 * d);
    }
}

// ---------------------------------------------------------------- activation quantizers

/// Activations to Q8_0 the way ggml-cpu does on AVX2 (arch/x86/quants.c quantize_row_q8_0):
/// `id = 127 / amax` and round-half-to-even (`_mm256_round_ps(.., _MM_ROUND_NEAREST)`). This
/// differs from the `_ref` quantizer only on exact ties, but parity with llama.cpp wants it.
pub(crate) fn quantize_act_q8_0(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(34)) {
        let (amax, _) = abs_max_signed(x);
        let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
        put_f16(b, 0, amax / 127.0);
        for j in 0..QK {
            b[2 + j] = (x[j] * id).round_ties_even() as i8 as u8;
        }
    }
}

/// Activations to Q8_1 as ggml-cpu does on AVX2 (quantize_row_q8_1): as Q8_0, plus
/// `s = d * sum(qs)` with d the f32 scale before rounding to f16.
pub(crate) fn quantize_act_q8_1(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(36)) {
        let (amax, _) = abs_max_signed(x);
        let d = amax / 127.0;
        let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
        let mut sum = 0i32;
        for j in 0..QK {
            let q = (x[j] * id).round_ties_even() as i8;
            sum += q as i32;
            b[4 + j] = q as u8;
        }
        put_f16(b, 0, d);
        put_f16(b, 2, d * sum as f32);
    }
}

// ---------------------------------------------------------------- scalar dot products

/// Q4_0 . Q8_0 (ggml_vec_dot_q4_0_q8_0 generic): integer dot per block, scaled by both d.
pub(crate) fn dot_q4_0_q8_0(w: &[u8], a: &[u8]) -> f32 {
    let mut sum = 0.0f32;
    for (x, y) in w.chunks_exact(18).zip(a.chunks_exact(34)) {
        let mut sumi = 0i32;
        for j in 0..16 {
            let q = x[2 + j];
            sumi += ((q & 0x0F) as i32 - 8) * y[2 + j] as i8 as i32;
            sumi += ((q >> 4) as i32 - 8) * y[18 + j] as i8 as i32;
        }
        sum += sumi as f32 * (f16_at(x, 0) * f16_at(y, 0));
    }
    sum
}

/// Q4_1 . Q8_1: `d_x d_y sum(q_x q_y) + m_x s_y`, where s_y carries the activation block sum.
pub(crate) fn dot_q4_1_q8_1(w: &[u8], a: &[u8]) -> f32 {
    let mut sum = 0.0f32;
    for (x, y) in w.chunks_exact(20).zip(a.chunks_exact(36)) {
        let mut sumi = 0i32;
        for j in 0..16 {
            let q = x[4 + j];
            sumi += (q & 0x0F) as i32 * y[4 + j] as i8 as i32;
            sumi += (q >> 4) as i32 * y[20 + j] as i8 as i32;
        }
        sum += sumi as f32 * (f16_at(x, 0) * f16_at(y, 0)) + f16_at(x, 2) * f16_at(y, 2);
    }
    sum
}

/// Q5_0 . Q8_0.
pub(crate) fn dot_q5_0_q8_0(w: &[u8], a: &[u8]) -> f32 {
    let mut sum = 0.0f32;
    for (x, y) in w.chunks_exact(22).zip(a.chunks_exact(34)) {
        let qh = u32::from_le_bytes([x[2], x[3], x[4], x[5]]);
        let mut sumi = 0i32;
        for j in 0..16 {
            let q = x[6 + j];
            let q0 = ((q & 0x0F) as u32 | (((qh >> j) & 1) << 4)) as i32 - 16;
            let q1 = ((q >> 4) as u32 | (((qh >> (j + 16)) & 1) << 4)) as i32 - 16;
            sumi += q0 * y[2 + j] as i8 as i32 + q1 * y[18 + j] as i8 as i32;
        }
        sum += sumi as f32 * (f16_at(x, 0) * f16_at(y, 0));
    }
    sum
}

/// Q5_1 . Q8_1: as Q4_1 with the 5th bit from qh.
pub(crate) fn dot_q5_1_q8_1(w: &[u8], a: &[u8]) -> f32 {
    let mut sum = 0.0f32;
    for (x, y) in w.chunks_exact(24).zip(a.chunks_exact(36)) {
        let qh = u32::from_le_bytes([x[4], x[5], x[6], x[7]]);
        let mut sumi = 0i32;
        for j in 0..16 {
            let q = x[8 + j];
            let q0 = ((q & 0x0F) as u32 | (((qh >> j) & 1) << 4)) as i32;
            let q1 = ((q >> 4) as u32 | (((qh >> (j + 16)) & 1) << 4)) as i32;
            sumi += q0 * y[4 + j] as i8 as i32 + q1 * y[20 + j] as i8 as i32;
        }
        sum += sumi as f32 * (f16_at(x, 0) * f16_at(y, 0)) + f16_at(x, 2) * f16_at(y, 2);
    }
    sum
}

/// Q8_0 . Q8_0.
pub(crate) fn dot_q8_0_q8_0(w: &[u8], a: &[u8]) -> f32 {
    let mut sum = 0.0f32;
    for (x, y) in w.chunks_exact(34).zip(a.chunks_exact(34)) {
        let mut sumi = 0i32;
        for j in 0..QK {
            sumi += x[2 + j] as i8 as i32 * y[2 + j] as i8 as i32;
        }
        sum += sumi as f32 * (f16_at(x, 0) * f16_at(y, 0));
    }
    sum
}
