//! The k-quant super-blocks Q2_K, Q3_K and Q5_K (the low-bit members of Q2_K / Q3_K_M / Q5_K_M
//! files): dequantization as ggml-quants.c dequantize_row_q{2,3,5}_K, quantizers after its
//! quantize_row_q{2,3,5}_K_ref, and scalar reference dot products against Q8_K.

// The quantizers walk parallel per-sub-block arrays (scales, mins, packed bytes) by index.
#![allow(clippy::needless_range_loop)]

use super::k_quants::{QK_K, bsum_at, make_qkx2_quants, make_qx_quants, nearest_int, scale_min_k4};
use super::legacy::f16_at;
use half::f16;

#[inline(always)]
fn y_scale(y: &[u8]) -> f32 {
    f32::from_le_bytes([y[0], y[1], y[2], y[3]])
}

// ---------------------------------------------------------------- Q2_K

/// Q2_K block (84 bytes): `scales[16], qs[64], d: f16, dmin: f16`. Scale byte `s` holds the
/// sub-block's 4-bit scale (low) and min (high); element `128 n + 32 j + l` is bits `2 j` of
/// `qs[32 n + l]` and sits in sub-block `8 n + 2 j + l / 16`.
pub(crate) fn dequantize_q2_k(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(84).zip(dst.chunks_exact_mut(QK_K)) {
        let (d, min) = (f16_at(b, 80), f16_at(b, 82));
        for (e, y) in y.iter_mut().enumerate() {
            let (n, j, l) = (e / 128, (e / 32) % 4, e % 32);
            let sc = b[8 * n + 2 * j + l / 16];
            let (dl, ml) = (d * (sc & 0x0F) as f32, min * (sc >> 4) as f32);
            let q = (b[16 + 32 * n + l] >> (2 * j)) & 3;
            *y = dl * q as f32 - ml;
        }
    }
}

/// Writes quants `l` (0..4 each, element order) into the 2-bit layout Q2_K and Q3_K share.
fn pack_2bit(l: &[u8; QK_K], qs: &mut [u8]) {
    for n in 0..2 {
        for i in 0..32 {
            let e = 128 * n + i;
            qs[32 * n + i] = (l[e] & 3)
                | ((l[e + 32] & 3) << 2)
                | ((l[e + 64] & 3) << 4)
                | ((l[e + 96] & 3) << 6);
        }
    }
}

/// After ggml quantize_row_q2_K_ref: a (scale, min) fit per 16 weighted by |x|, both quantized
/// to 4 bits against f16 super-scales, then the weights requantized.
pub(crate) fn quantize_q2_k(src: &[f32], dst: &mut [u8]) {
    const Q4SCALE: f32 = 15.0;
    for (x, b) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(84)) {
        let mut l = [0u8; QK_K];
        let (mut scales, mut mins) = ([0f32; 16], [0f32; 16]);
        for j in 0..16 {
            let xs = &x[16 * j..16 * j + 16];
            let w: Vec<f32> = xs.iter().map(|v| v.abs()).collect();
            let (s, m) = make_qkx2_quants(xs, &w, 3, &mut l[16 * j..16 * j + 16], (-0.5, 0.1, 15));
            scales[j] = s;
            mins[j] = m;
        }
        let max_scale = scales.iter().copied().fold(0.0f32, f32::max);
        let max_min = mins.iter().copied().fold(0.0f32, f32::max);
        b.fill(0);
        let d = if max_scale > 0.0 {
            let iscale = Q4SCALE / max_scale;
            for j in 0..16 {
                b[j] = nearest_int(iscale * scales[j]).clamp(0, 15) as u8;
            }
            max_scale / Q4SCALE
        } else {
            0.0
        };
        let dmin = if max_min > 0.0 {
            let iscale = Q4SCALE / max_min;
            for j in 0..16 {
                b[j] |= (nearest_int(iscale * mins[j]).clamp(0, 15) as u8) << 4;
            }
            max_min / Q4SCALE
        } else {
            0.0
        };
        let (d, dmin) = (f16::from_f32(d), f16::from_f32(dmin));
        b[80..82].copy_from_slice(&d.to_le_bytes());
        b[82..84].copy_from_slice(&dmin.to_le_bytes());
        for j in 0..16 {
            let ds = d.to_f32() * (b[j] & 0x0F) as f32;
            if ds == 0.0 {
                continue;
            }
            let dm = dmin.to_f32() * (b[j] >> 4) as f32;
            for i in 16 * j..16 * j + 16 {
                l[i] = nearest_int((x[i] + dm) / ds).clamp(0, 3) as u8;
            }
        }
        pack_2bit(&l, &mut b[16..80]);
    }
}

/// Q2_K . Q8_K (ggml_vec_dot_q2_K_q8_K generic).
pub(crate) fn dot_q2_k_q8_k(w: &[u8], a: &[u8]) -> f32 {
    let mut sum = 0.0f32;
    for (x, y) in w.chunks_exact(84).zip(a.chunks_exact(292)) {
        let yq = &y[4..260];
        let (mut isum, mut summs) = (0i32, 0i32);
        for s in 0..16 {
            let sc = x[s];
            summs += (sc >> 4) as i32 * bsum_at(y, s);
            let (n, j, half) = (s / 8, (s % 8) / 2, s % 2);
            let mut isuml = 0i32;
            for l in 16 * half..16 * half + 16 {
                let q = (x[16 + 32 * n + l] >> (2 * j)) & 3;
                isuml += q as i32 * yq[128 * n + 32 * j + l] as i8 as i32;
            }
            isum += (sc & 0x0F) as i32 * isuml;
        }
        let yd = y_scale(y);
        let (dall, dmin) = (yd * f16_at(x, 80), yd * f16_at(x, 82));
        sum += dall * isum as f32 - dmin * summs as f32;
    }
    sum
}

// ---------------------------------------------------------------- Q3_K

/// The 16 signed 6-bit scales of a Q3_K block from its 12 packed bytes: low 4 bits of scale `j`
/// in byte `j % 8` (high nibble for `j >= 8`), high 2 bits in byte `8 + j % 4` at `2 (j / 4)`.
#[inline(always)]
pub(crate) fn q3_scales(s: &[u8]) -> [i8; 16] {
    let mut out = [0i8; 16];
    for (j, o) in out.iter_mut().enumerate() {
        let low = if j < 8 { s[j] & 0x0F } else { s[j - 8] >> 4 };
        let high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
        *o = (low | (high << 4)) as i8 - 32;
    }
    out
}

/// The signed quant (-4..4) of element `e` of a Q3_K block: 2 bits as Q2_K, minus 4 unless
/// bit `e / 32` of `hmask[e % 32]` is set.
#[inline(always)]
fn q3_at(b: &[u8], e: usize) -> i32 {
    let (n, j, l) = (e / 128, (e / 32) % 4, e % 32);
    let low = ((b[32 + 32 * n + l] >> (2 * j)) & 3) as i32;
    let high = (b[l] >> (e / 32)) & 1;
    low - if high == 0 { 4 } else { 0 }
}

/// Q3_K block (110 bytes): `hmask[32], qs[64], scales[12], d: f16`.
pub(crate) fn dequantize_q3_k(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(110).zip(dst.chunks_exact_mut(QK_K)) {
        let d = f16_at(b, 108);
        let scales = q3_scales(&b[96..108]);
        for (e, y) in y.iter_mut().enumerate() {
            let dl = d * scales[e / 16] as f32;
            *y = dl * q3_at(b, e) as f32;
        }
    }
}

/// After ggml quantize_row_q3_K_ref: a symmetric scale per 16 (make_qx_quants, as ggml's
/// rmse fit), scales to 6 bits against one f16 super-scale, then the weights requantized.
pub(crate) fn quantize_q3_k(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(110)) {
        let mut l = [0u8; QK_K];
        let mut scales = [0f32; 16];
        let (mut max_scale, mut amax) = (0.0f32, 0.0f32);
        for j in 0..16 {
            scales[j] = make_qx_quants(&x[16 * j..16 * j + 16], 4, &mut l[16 * j..16 * j + 16]);
            if scales[j].abs() > amax {
                amax = scales[j].abs();
                max_scale = scales[j];
            }
        }
        b.fill(0);
        if amax == 0.0 {
            continue;
        }
        let iscale = -32.0 / max_scale;
        for j in 0..16 {
            let q = (nearest_int(iscale * scales[j]).clamp(-32, 31) + 32) as u8;
            if j < 8 {
                b[96 + j] = q & 0x0F;
            } else {
                b[96 + j - 8] |= (q & 0x0F) << 4;
            }
            b[96 + 8 + j % 4] |= (q >> 4) << (2 * (j / 4));
        }
        let d = f16::from_f32(1.0 / iscale);
        b[108..110].copy_from_slice(&d.to_le_bytes());
        let sc = q3_scales(&b[96..108]);
        for j in 0..16 {
            let dl = d.to_f32() * sc[j] as f32;
            if dl == 0.0 {
                continue;
            }
            for i in 16 * j..16 * j + 16 {
                l[i] = (nearest_int(x[i] / dl).clamp(-4, 3) + 4) as u8;
            }
        }
        for (e, q) in l.iter_mut().enumerate() {
            if *q > 3 {
                b[e % 32] |= 1 << (e / 32);
                *q -= 4;
            }
        }
        pack_2bit(&l, &mut b[32..96]);
    }
}

/// Q3_K . Q8_K: `d_x d_y sum_j sc_j (q . y)_j` over 16 sub-blocks of 16.
pub(crate) fn dot_q3_k_q8_k(w: &[u8], a: &[u8]) -> f32 {
    let mut sum = 0.0f32;
    for (x, y) in w.chunks_exact(110).zip(a.chunks_exact(292)) {
        let yq = &y[4..260];
        let scales = q3_scales(&x[96..108]);
        let mut isum = 0i32;
        for (s, &sc) in scales.iter().enumerate() {
            let part: i32 = (16 * s..16 * s + 16)
                .map(|e| q3_at(x, e) * yq[e] as i8 as i32)
                .sum();
            isum += sc as i32 * part;
        }
        sum += f16_at(x, 108) * y_scale(y) * isum as f32;
    }
    sum
}

// ---------------------------------------------------------------- Q5_K

/// The unsigned 5-bit quant of element `e` of a Q5_K block: Q4_K's nibble plus bit `e / 32`
/// of `qh[e % 32]` as the 5th bit.
#[inline(always)]
fn q5_at(b: &[u8], e: usize) -> u8 {
    let (c, hi, l) = (e / 64, (e / 32) % 2, e % 32);
    let nib = (b[48 + 32 * c + l] >> (4 * hi)) & 0x0F;
    nib | (((b[16 + l] >> (e / 32)) & 1) << 4)
}

/// Q5_K block (176 bytes): `d: f16, dmin: f16, scales[12], qh[32], qs[128]`.
pub(crate) fn dequantize_q5_k(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(176).zip(dst.chunks_exact_mut(QK_K)) {
        let (d, min) = (f16_at(b, 0), f16_at(b, 2));
        for (j, y) in y.chunks_exact_mut(32).enumerate() {
            let (sc, m) = scale_min_k4(j, &b[4..16]);
            let (d1, m1) = (d * sc as f32, min * m as f32);
            for (l, y) in y.iter_mut().enumerate() {
                *y = d1 * q5_at(b, 32 * j + l) as f32 - m1;
            }
        }
    }
}

/// After ggml quantize_row_q5_K_ref: Q4_K's scheme with 5-bit quants.
pub(crate) fn quantize_q5_k(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(176)) {
        let mut l = [0u8; QK_K];
        let (mut scales, mut mins) = ([0f32; 8], [0f32; 8]);
        let sum_x2: f32 = x.iter().map(|v| v * v).sum();
        let av_x = (sum_x2 / QK_K as f32).sqrt();
        for j in 0..8 {
            let xs = &x[32 * j..32 * j + 32];
            let w: Vec<f32> = xs.iter().map(|v| av_x + v.abs()).collect();
            let (s, m) = make_qkx2_quants(xs, &w, 31, &mut l[32 * j..32 * j + 32], (-0.5, 0.1, 15));
            scales[j] = s;
            mins[j] = m;
        }
        let max_scale = scales.iter().copied().fold(0.0f32, f32::max);
        let max_min = mins.iter().copied().fold(0.0f32, f32::max);
        let inv_scale = if max_scale > 0.0 {
            63.0 / max_scale
        } else {
            0.0
        };
        let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
        b.fill(0);
        let packed = &mut b[4..16];
        for j in 0..8 {
            let ls = nearest_int(inv_scale * scales[j]).clamp(0, 63) as u8;
            let lm = nearest_int(inv_min * mins[j]).clamp(0, 63) as u8;
            if j < 4 {
                packed[j] = ls;
                packed[j + 4] = lm;
            } else {
                packed[j + 4] = (ls & 0x0F) | ((lm & 0x0F) << 4);
                packed[j - 4] |= (ls >> 4) << 6;
                packed[j] |= (lm >> 4) << 6;
            }
        }
        let d = f16::from_f32(max_scale / 63.0);
        let dmin = f16::from_f32(max_min / 63.0);
        b[0..2].copy_from_slice(&d.to_le_bytes());
        b[2..4].copy_from_slice(&dmin.to_le_bytes());
        for j in 0..8 {
            let (sc, m) = scale_min_k4(j, &b[4..16]);
            let ds = d.to_f32() * sc as f32;
            if ds == 0.0 {
                continue;
            }
            let dm = dmin.to_f32() * m as f32;
            for i in 32 * j..32 * j + 32 {
                l[i] = nearest_int((x[i] + dm) / ds).clamp(0, 31) as u8;
            }
        }
        for (e, &q) in l.iter().enumerate() {
            let (c, hi, i) = (e / 64, (e / 32) % 2, e % 32);
            b[48 + 32 * c + i] |= (q & 0x0F) << (4 * hi);
            b[16 + i] |= (q >> 4) << (e / 32);
        }
    }
}

/// Q5_K . Q8_K: as Q4_K, `d sum_j sc_j (q . y)_j - dmin sum_j m_j ysum_j`.
pub(crate) fn dot_q5_k_q8_k(w: &[u8], a: &[u8]) -> f32 {
    let mut sum = 0.0f32;
    for (x, y) in w.chunks_exact(176).zip(a.chunks_exact(292)) {
        let yq = &y[4..260];
        let (mut sumi, mut summins) = (0i32, 0i32);
        for j in 0..8 {
            let (sc, m) = scale_min_k4(j, &x[4..16]);
            summins += m as i32 * (bsum_at(y, 2 * j) + bsum_at(y, 2 * j + 1));
            let s: i32 = (32 * j..32 * j + 32)
                .map(|e| q5_at(x, e) as i32 * yq[e] as i8 as i32)
                .sum();
            sumi += sc as i32 * s;
        }
        let yd = y_scale(y);
        sum += yd * f16_at(x, 0) * sumi as f32 - yd * f16_at(x, 2) * summins as f32;
    }
    sum
}
