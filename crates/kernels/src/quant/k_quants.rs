//! The 256-element "k-quant" super-block formats Q4_K, Q6_K and the Q8_K activation format:
//! dequantization, reference quantizers (after ggml-quants.c quantize_row_q{4,6,8}_K_ref with
//! make_qkx2_quants / make_qx_quants) and scalar reference dot products against Q8_K.

use super::legacy::f16_at;
use half::f16;

/// Elements per super-block.
pub(crate) const QK_K: usize = 256;

/// ggml's `nearest_int`: round half to even (the 1.5 * 2^23 trick in ggml-quants.c).
#[inline(always)]
pub(crate) fn nearest_int(v: f32) -> i32 {
    v.round_ties_even() as i32
}

/// Scale and min of sub-block `j` (0..8) from the 12 packed bytes (ggml get_scale_min_k4).
#[inline(always)]
pub(crate) fn scale_min_k4(j: usize, s: &[u8]) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        (
            (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4),
            (s[j + 4] >> 4) | ((s[j] >> 6) << 4),
        )
    }
}

// ---------------------------------------------------------------- Q4_K

/// Q4_K block (144 bytes): `d: f16, dmin: f16, scales[12], qs[128]`; each 64-element chunk
/// takes 32 bytes of qs, low nibbles for its first 32 elements, high nibbles for the next 32.
pub(crate) fn dequantize_q4_k(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(144).zip(dst.chunks_exact_mut(QK_K)) {
        let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
        let scales = &b[4..16];
        for c in 0..4 {
            let q = &b[16 + 32 * c..48 + 32 * c];
            let (sc0, m0) = scale_min_k4(2 * c, scales);
            let (sc1, m1) = scale_min_k4(2 * c + 1, scales);
            let (d0, m0) = (d * sc0 as f32, dmin * m0 as f32);
            let (d1, m1) = (d * sc1 as f32, dmin * m1 as f32);
            let y = &mut y[64 * c..64 * c + 64];
            for l in 0..32 {
                y[l] = d0 * (q[l] & 0x0F) as f32 - m0;
                y[l + 32] = d1 * (q[l] >> 4) as f32 - m1;
            }
        }
    }
}

/// ggml make_qkx2_quants: asymmetric `scale * L + min` fit of `x` with `L` in 0..=nmax,
/// searching `nstep + 1` candidate scales around `nmax / (max - min)` for the least weighted
/// squared error. Returns `(scale, -min)`. Q4_K searches `(-1.0, 0.1, 20)`, Q5_K and Q2_K
/// `(-0.5, 0.1, 15)` (the `rmin, rdelta, nstep` arguments in ggml-quants.c).
pub(crate) fn make_qkx2_quants(
    x: &[f32],
    weights: &[f32],
    nmax: i32,
    l_out: &mut [u8],
    (rmin, rdelta, nstep): (f32, f32, i32),
) -> (f32, f32) {
    let n = x.len();
    let mut min = x.iter().copied().fold(f32::MAX, f32::min);
    let max = x.iter().copied().fold(f32::MIN, f32::max);
    let sum_w: f32 = weights.iter().sum();
    let sum_x: f32 = x.iter().zip(weights).map(|(x, w)| x * w).sum();
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l_out.fill(0);
        return (0.0, -min);
    }
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_err = 0.0;
    for i in 0..n {
        let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
        l_out[i] = l as u8;
        let diff = scale * l as f32 + min - x[i];
        best_err += weights[i] * diff * diff;
    }
    let mut laux = [0u8; 32];
    for is in 0..=nstep {
        iscale = (rmin + rdelta * is as f32 + nmax as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
        for i in 0..n {
            let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            laux[i] = l as u8;
            let (w, l) = (weights[i], l as f32);
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut err = 0.0;
            for i in 0..n {
                let diff = this_scale * laux[i] as f32 + this_min - x[i];
                err += weights[i] * diff * diff;
            }
            if err < best_err {
                l_out.copy_from_slice(&laux[..n]);
                best_err = err;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// Reference Q4_K quantizer (ggml quantize_row_q4_K_ref): fit 8 sub-block (scale, min) pairs,
/// quantize them to 6 bits against two f16 super-scales, then requantize the weights.
pub(crate) fn quantize_q4_k(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(144)) {
        let mut l = [0u8; QK_K];
        let mut scales = [0f32; 8];
        let mut mins = [0f32; 8];
        let sum_x2: f32 = x.iter().map(|v| v * v).sum();
        let av_x = (sum_x2 / QK_K as f32).sqrt();
        for j in 0..8 {
            let xs = &x[32 * j..32 * j + 32];
            let mut w = [0f32; 32];
            for (w, v) in w.iter_mut().zip(xs) {
                *w = av_x + v.abs();
            }
            let (s, m) = make_qkx2_quants(xs, &w, 15, &mut l[32 * j..32 * j + 32], (-1.0, 0.1, 20));
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
        let mut packed = [0u8; 12];
        for j in 0..8 {
            let ls = nearest_int(inv_scale * scales[j]).clamp(0, 63) as u8;
            let lm = nearest_int(inv_min * mins[j]).clamp(0, 63) as u8;
            if j < 4 {
                packed[j] |= ls;
                packed[j + 4] |= lm;
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
        b[4..16].copy_from_slice(&packed);
        for j in 0..8 {
            let (sc, m) = scale_min_k4(j, &packed);
            let ds = d.to_f32() * sc as f32;
            if ds == 0.0 {
                continue;
            }
            let dm = dmin.to_f32() * m as f32;
            for i in 32 * j..32 * j + 32 {
                l[i] = nearest_int((x[i] + dm) / ds).clamp(0, 15) as u8;
            }
        }
        for c in 0..4 {
            for i in 0..32 {
                b[16 + 32 * c + i] = l[64 * c + i] | (l[64 * c + 32 + i] << 4);
            }
        }
    }
}

/// Q4_K . Q8_K (ggml_vec_dot_q4_K_q8_K generic): `d sum_j sc_j (q . y)_j - dmin sum_j m_j
/// ysum_j`, with the per-32 activation sums taken from the Q8_K bsums.
pub(crate) fn dot_q4_k_q8_k(w: &[u8], a: &[u8]) -> f32 {
    let mut sum = 0.0f32;
    for (x, y) in w.chunks_exact(144).zip(a.chunks_exact(292)) {
        let yd = f32::from_le_bytes([y[0], y[1], y[2], y[3]]);
        let yq = &y[4..260];
        let scales = &x[4..16];
        let (mut sumi, mut summins) = (0i32, 0i32);
        for j in 0..8 {
            let (sc, m) = scale_min_k4(j, scales);
            let bsum = bsum_at(y, 2 * j) + bsum_at(y, 2 * j + 1);
            summins += m as i32 * bsum;
            let q = &x[16 + 32 * (j / 2)..48 + 32 * (j / 2)];
            let shift = 4 * (j % 2);
            let mut s = 0i32;
            for l in 0..32 {
                s += ((q[l] >> shift) & 0x0F) as i32 * yq[32 * j + l] as i8 as i32;
            }
            sumi += sc as i32 * s;
        }
        sum += yd * f16_at(x, 0) * sumi as f32 - yd * f16_at(x, 2) * summins as f32;
    }
    sum
}

// ---------------------------------------------------------------- Q6_K

/// Q6_K block (210 bytes): `ql[128], qh[64], scales: i8[16], d: f16` (d last). Per 128-element
/// half, ql[l] holds elems l (low nibble) and l+64 (high), ql[l+32] elems l+32 and l+96, and
/// qh[l] their 2 high bits at shifts 0, 4, 2, 6 (ggml dequantize_row_q6_K).
pub(crate) fn dequantize_q6_k(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(210).zip(dst.chunks_exact_mut(QK_K)) {
        let d = f16_at(b, 208);
        for (h, y) in y.chunks_exact_mut(128).enumerate() {
            let ql = &b[64 * h..64 * h + 64];
            let qh = &b[128 + 32 * h..160 + 32 * h];
            let sc = &b[192 + 8 * h..200 + 8 * h];
            for l in 0..32 {
                let is = l / 16;
                let q = q6_quads(ql, qh, l);
                for (k, &q) in q.iter().enumerate() {
                    y[l + 32 * k] = d * (sc[is + 2 * k] as i8) as f32 * q as f32;
                }
            }
        }
    }
}

/// The four signed 6-bit quants at offsets l, l+32, l+64, l+96 of a Q6_K half-block.
#[inline(always)]
fn q6_quads(ql: &[u8], qh: &[u8], l: usize) -> [i32; 4] {
    [
        ((ql[l] & 0x0F) | ((qh[l] & 3) << 4)) as i32 - 32,
        ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32,
        ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32,
        ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32,
    ]
}

/// ggml make_qx_quants (rmse_type 1): symmetric fit of `x` with `L - nmax` in -nmax..nmax-1,
/// weighting by x^2 and trying 18 scales around `-nmax / max`. Writes `L` (biased by nmax).
pub(crate) fn make_qx_quants(x: &[f32], nmax: i32, l_out: &mut [u8]) -> f32 {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax < 1e-15 {
        l_out.fill(0);
        return 0.0;
    }
    let fit = |iscale: f32| {
        let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
        for &v in x {
            let l = nearest_int(iscale * v).clamp(-nmax, nmax - 1) as f32;
            let w = v * v;
            sumlx += w * v * l;
            suml2 += w * l * l;
        }
        (sumlx, suml2)
    };
    let mut best_iscale = -(nmax as f32) / max;
    let (sumlx, suml2) = fit(best_iscale);
    let mut scale = if suml2 > 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in -9..=9 {
        if is == 0 {
            continue;
        }
        let iscale = -(nmax as f32 + 0.1 * is as f32) / max;
        let (sumlx, suml2) = fit(iscale);
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            scale = sumlx / suml2;
            best = scale * sumlx;
            best_iscale = iscale;
        }
    }
    for (l, &v) in l_out.iter_mut().zip(x) {
        *l = (nmax + nearest_int(best_iscale * v).clamp(-nmax, nmax - 1)) as u8;
    }
    scale
}

/// Reference Q6_K quantizer (ggml quantize_row_q6_K_ref).
pub(crate) fn quantize_q6_k(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(210)) {
        let mut l = [0u8; QK_K];
        let mut scales = [0f32; 16];
        let (mut max_scale, mut max_abs_scale) = (0.0f32, 0.0f32);
        for ib in 0..16 {
            let s = make_qx_quants(&x[16 * ib..16 * ib + 16], 32, &mut l[16 * ib..16 * ib + 16]);
            scales[ib] = s;
            if s.abs() > max_abs_scale {
                max_abs_scale = s.abs();
                max_scale = s;
            }
        }
        b.fill(0);
        if max_abs_scale < 1e-15 {
            continue;
        }
        let iscale = -128.0 / max_scale;
        let d = f16::from_f32(1.0 / iscale);
        b[208..210].copy_from_slice(&d.to_le_bytes());
        for ib in 0..16 {
            let sc = nearest_int(iscale * scales[ib]).min(127) as i8;
            b[192 + ib] = sc as u8;
            let ds = d.to_f32() * sc as f32;
            if ds == 0.0 {
                continue;
            }
            for i in 16 * ib..16 * ib + 16 {
                l[i] = (nearest_int(x[i] / ds).clamp(-32, 31) + 32) as u8;
            }
        }
        for h in 0..2 {
            let l = &l[128 * h..128 * h + 128];
            for i in 0..32 {
                let (q1, q2, q3, q4) = (l[i], l[i + 32], l[i + 64], l[i + 96]);
                b[64 * h + i] = (q1 & 0x0F) | ((q3 & 0x0F) << 4);
                b[64 * h + i + 32] = (q2 & 0x0F) | ((q4 & 0x0F) << 4);
                b[128 + 32 * h + i] =
                    (q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6);
            }
        }
    }
}

/// Q6_K . Q8_K: `d_x d_y sum_i sc_i sum (q - 32) y` over 16 sub-blocks of 16.
pub(crate) fn dot_q6_k_q8_k(w: &[u8], a: &[u8]) -> f32 {
    let mut sum = 0.0f32;
    for (x, y) in w.chunks_exact(210).zip(a.chunks_exact(292)) {
        let yd = f32::from_le_bytes([y[0], y[1], y[2], y[3]]);
        let yq = &y[4..260];
        let mut sumi = 0i32;
        for h in 0..2 {
            let ql = &x[64 * h..64 * h + 64];
            let qh = &x[128 + 32 * h..160 + 32 * h];
            let sc = &x[192 + 8 * h..200 + 8 * h];
            let yq = &yq[128 * h..128 * h + 128];
            for l in 0..32 {
                let q = q6_quads(ql, qh, l);
                for (k, &q) in q.iter().enumerate() {
                    sumi += (sc[l / 16 + 2 * k] as i8) as i32 * q * yq[l + 32 * k] as i8 as i32;
                }
            }
        }
        sum += f16_at(x, 208) * yd * sumi as f32;
    }
    sum
}

// ---------------------------------------------------------------- Q8_K

#[inline(always)]
pub(crate) fn bsum_at(y: &[u8], j: usize) -> i32 {
    i16::from_le_bytes([y[260 + 2 * j], y[261 + 2 * j]]) as i32
}

/// Q8_K block (292 bytes): `d: f32, qs: i8[256], bsums: i16[16]` (sums of 16 quants each).
pub(crate) fn dequantize_q8_k(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(292).zip(dst.chunks_exact_mut(QK_K)) {
        let d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        for (y, &q) in y.iter_mut().zip(&b[4..260]) {
            *y = d * q as i8 as f32;
        }
    }
}

/// ggml quantize_row_q8_K_ref (also what ggml-cpu uses for activations on x86): the signed
/// extreme maps to -127, `d = 1 / iscale` kept as f32.
pub(crate) fn quantize_q8_k(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(292)) {
        let (mut amax, mut max) = (0.0f32, 0.0f32);
        for &v in x {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        b.fill(0);
        if amax == 0.0 {
            continue;
        }
        let iscale = -127.0 / max;
        for (q, &v) in b[4..260].iter_mut().zip(x) {
            *q = nearest_int(iscale * v).min(127) as i8 as u8;
        }
        for j in 0..16 {
            let s: i32 = b[4 + 16 * j..20 + 16 * j]
                .iter()
                .map(|&q| q as i8 as i32)
                .sum();
            b[260 + 2 * j..262 + 2 * j].copy_from_slice(&(s as i16).to_le_bytes());
        }
        b[0..4].copy_from_slice(&(1.0 / iscale).to_le_bytes());
    }
}
