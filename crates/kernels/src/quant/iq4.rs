//! IQ4_NL and IQ4_XS: 4-bit indices into a fixed non-linear grid of 16 signed values
//! (ggml-common.h kvalues_iq4nl), one f16 scale per 32 (NL) or 6-bit scales per 32 under an
//! f16 super-scale (XS). Dequantization as ggml-quants.c, simple nearest-grid quantizers (for
//! test files; ggml's importance-weighted search is not needed to read real files) and scalar
//! reference dots against Q8_0 (NL) and Q8_K (XS), as ggml-cpu pairs them.

use super::k_quants::{QK_K, nearest_int};
use super::legacy::f16_at;
use half::f16;

/// The IQ4 grid (ggml-common.h kvalues_iq4nl).
pub(crate) const KVALUES: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// The 32 grid values of one 16-byte nibble run: low nibbles are elements 0..16, high 16..32.
#[inline(always)]
fn grid_32(qs: &[u8]) -> [i8; 32] {
    let mut out = [0i8; 32];
    for j in 0..16 {
        out[j] = KVALUES[(qs[j] & 0x0F) as usize];
        out[j + 16] = KVALUES[(qs[j] >> 4) as usize];
    }
    out
}

/// IQ4_NL block (18 bytes): `d: f16, qs[16]`.
pub(crate) fn dequantize_iq4_nl(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(18).zip(dst.chunks_exact_mut(32)) {
        let d = f16_at(b, 0);
        for (y, q) in y.iter_mut().zip(grid_32(&b[2..18])) {
            *y = d * q as f32;
        }
    }
}

/// The 6-bit scale (biased by 32) of sub-block `ib` (0..8) of an IQ4_XS block.
#[inline(always)]
fn xs_scale(b: &[u8], ib: usize) -> i32 {
    let scales_h = u16::from_le_bytes([b[2], b[3]]);
    let low = (b[4 + ib / 2] >> (4 * (ib % 2))) & 0x0F;
    let high = ((scales_h >> (2 * ib)) & 3) as u8;
    (low | (high << 4)) as i32 - 32
}

/// IQ4_XS block (136 bytes): `d: f16, scales_h: u16, scales_l[4], qs[128]`.
pub(crate) fn dequantize_iq4_xs(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(136).zip(dst.chunks_exact_mut(QK_K)) {
        let d = f16_at(b, 0);
        for (ib, y) in y.chunks_exact_mut(32).enumerate() {
            let dl = d * xs_scale(b, ib) as f32;
            for (y, q) in y.iter_mut().zip(grid_32(&b[8 + 16 * ib..24 + 16 * ib])) {
                *y = dl * q as f32;
            }
        }
    }
}

/// Index of the grid value nearest `v`.
fn nearest_grid(v: f32) -> u8 {
    let mut best = 0;
    for (i, &k) in KVALUES.iter().enumerate() {
        if (v - k as f32).abs() < (v - KVALUES[best] as f32).abs() {
            best = i;
        }
    }
    best as u8
}

/// A scale for 32 values on the grid: the signed extreme maps to -127, then one least-squares
/// refit of the scale to the chosen indices (the first steps of ggml's quantize_row_iq4_nl_impl).
fn fit_scale(x: &[f32]) -> f32 {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax == 0.0 {
        return 0.0;
    }
    let d = max / KVALUES[0] as f32;
    let (mut sumqx, mut sumq2) = (0.0f32, 0.0f32);
    for &v in x {
        let q = KVALUES[nearest_grid(v / d) as usize] as f32;
        sumqx += v * q;
        sumq2 += q * q;
    }
    if sumq2 > 0.0 { sumqx / sumq2 } else { d }
}

/// Writes the grid indices of `x / d` as nibbles (low: elements 0..16, high: 16..32).
fn put_indices(x: &[f32], d: f32, qs: &mut [u8]) {
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    for j in 0..16 {
        qs[j] = nearest_grid(x[j] * id) | (nearest_grid(x[j + 16] * id) << 4);
    }
}

pub(crate) fn quantize_iq4_nl(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(32).zip(dst.chunks_exact_mut(18)) {
        let d = f16::from_f32(fit_scale(x));
        b[0..2].copy_from_slice(&d.to_le_bytes());
        put_indices(x, d.to_f32(), &mut b[2..18]);
    }
}

/// Sub-block scales as for IQ4_NL, quantized to 6 bits against `d = -max / 32`
/// (ggml quantize_row_iq4_xs_impl), then the indices against the quantized scales.
pub(crate) fn quantize_iq4_xs(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(136)) {
        let scales: Vec<f32> = x.chunks_exact(32).map(fit_scale).collect();
        let (mut amax, mut max) = (0.0f32, 0.0f32);
        for &s in &scales {
            if s.abs() > amax {
                amax = s.abs();
                max = s;
            }
        }
        b.fill(0);
        if amax == 0.0 {
            // Every scale 0 (ls = 32) decodes to zeros.
            b[2..4].copy_from_slice(&0xAAAAu16.to_le_bytes());
            continue;
        }
        let d = f16::from_f32(-max / 32.0);
        let id = 1.0 / d.to_f32();
        b[0..2].copy_from_slice(&d.to_le_bytes());
        let mut scales_h = 0u16;
        for (ib, &s) in scales.iter().enumerate() {
            let l = nearest_int(id * s).clamp(-32, 31) + 32;
            b[4 + ib / 2] |= ((l & 0x0F) as u8) << (4 * (ib % 2));
            scales_h |= ((l >> 4) as u16) << (2 * ib);
        }
        b[2..4].copy_from_slice(&scales_h.to_le_bytes());
        for ib in 0..8 {
            let dl = d.to_f32() * xs_scale(b, ib) as f32;
            let (xs, qs) = (&x[32 * ib..32 * ib + 32], &mut b[8 + 16 * ib..24 + 16 * ib]);
            put_indices(xs, dl, qs);
        }
    }
}

/// IQ4_NL . Q8_0 (ggml_vec_dot_iq4_nl_q8_0 generic).
pub(crate) fn dot_iq4_nl_q8_0(w: &[u8], a: &[u8]) -> f32 {
    let mut sum = 0.0f32;
    for (x, y) in w.chunks_exact(18).zip(a.chunks_exact(34)) {
        let q = grid_32(&x[2..18]);
        let sumi: i32 = q
            .iter()
            .zip(&y[2..34])
            .map(|(&q, &v)| q as i32 * v as i8 as i32)
            .sum();
        sum += f16_at(x, 0) * f16_at(y, 0) * sumi as f32;
    }
    sum
}

/// IQ4_XS . Q8_K (ggml_vec_dot_iq4_xs_q8_K generic): integer sums per super-block.
pub(crate) fn dot_iq4_xs_q8_k(w: &[u8], a: &[u8]) -> f32 {
    let mut sum = 0.0f32;
    for (x, y) in w.chunks_exact(136).zip(a.chunks_exact(292)) {
        let yd = f32::from_le_bytes([y[0], y[1], y[2], y[3]]);
        let mut isum = 0i32;
        for ib in 0..8 {
            let q = grid_32(&x[8 + 16 * ib..24 + 16 * ib]);
            let s: i32 = q
                .iter()
                .zip(&y[4 + 32 * ib..36 + 32 * ib])
                .map(|(&q, &v)| q as i32 * v as i8 as i32)
                .sum();
            isum += xs_scale(x, ib) * s;
        }
        sum += f16_at(x, 0) * yd * isum as f32;
    }
    sum
}
