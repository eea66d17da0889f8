//! Quant formats: hand-made blocks dequantize exactly, quantize -> dequantize stays within
//! per-format error bounds, and every SIMD dot kernel matches the scalar one and the
//! dequantized f64 dot.

#![allow(clippy::unwrap_used)] // tests may unwrap

use half::f16;
use pagoda_kernels::cpu::{self, SimdLevel};
use pagoda_kernels::quant::{
    GgmlType, dequantize_row, quantize_activations, quantize_activations_at, quantize_row, vec_dot,
};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

const WEIGHT_TYPES: [GgmlType; 15] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q8_0,
    GgmlType::Q4_K,
    GgmlType::Q6_K,
    GgmlType::Q5_1,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q5_K,
    GgmlType::IQ4_NL,
    GgmlType::IQ4_XS,
];

const ALL_TYPES: [GgmlType; 17] = GgmlType::ALL;

fn random_row(rng: &mut StdRng, n: usize, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|_| rng.random_range(-1.0f32..1.0) * scale)
        .collect()
}

fn quantized(ty: GgmlType, x: &[f32]) -> Vec<u8> {
    let mut q = vec![0u8; ty.row_bytes(x.len()).unwrap()];
    quantize_row(ty, x, &mut q);
    q
}

fn dequantized(ty: GgmlType, q: &[u8], n: usize) -> Vec<f32> {
    let mut y = vec![0f32; n];
    dequantize_row(ty, q, &mut y);
    y
}

fn h(v: f32) -> [u8; 2] {
    f16::from_f32(v).to_le_bytes()
}

// ---------------------------------------------------------------- hand-made blocks

#[test]
fn float_rows_dequantize_exactly() {
    let vals = [1.5f32, -2.25, 0.0, 65504.0];
    let f32_bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
    assert_eq!(dequantized(GgmlType::F32, &f32_bytes, 4), vals);
    let f16_bytes: Vec<u8> = vals.iter().flat_map(|&v| h(v)).collect();
    assert_eq!(dequantized(GgmlType::F16, &f16_bytes, 4), vals);
    // bf16 is the top half of the f32 bits: 1.5 = 0x3FC0, -2.25 = 0xC010, 0, 65536 = 0x4780.
    let bf16_bytes = [0xC0, 0x3F, 0x10, 0xC0, 0x00, 0x00, 0x80, 0x47];
    assert_eq!(
        dequantized(GgmlType::BF16, &bf16_bytes, 4),
        [1.5, -2.25, 0.0, 65536.0]
    );
}

#[test]
fn q4_0_and_q4_1_blocks_dequantize_exactly() {
    // qs[j] = j | (15 - j) << 4: elem j has nibble j, elem j+16 has nibble 15 - j.
    let qs: Vec<u8> = (0..16u8).map(|j| j | ((15 - j) << 4)).collect();
    let mut q4_0 = h(0.5).to_vec();
    q4_0.extend(&qs);
    let y = dequantized(GgmlType::Q4_0, &q4_0, 32);
    for j in 0..16 {
        assert_eq!(y[j], (j as f32 - 8.0) * 0.5);
        assert_eq!(y[j + 16], (7.0 - j as f32) * 0.5);
    }
    let mut q4_1 = h(0.25).to_vec();
    q4_1.extend(h(-1.0));
    q4_1.extend(&qs);
    let y = dequantized(GgmlType::Q4_1, &q4_1, 32);
    for j in 0..16 {
        assert_eq!(y[j], j as f32 * 0.25 - 1.0);
        assert_eq!(y[j + 16], (15 - j) as f32 * 0.25 - 1.0);
    }
}

#[test]
fn q5_0_block_dequantizes_exactly() {
    // Low nibbles 3 everywhere; high bit set for even elements only: q = 19 or 3.
    let mut b = h(2.0).to_vec();
    b.extend(0x5555_5555u32.to_le_bytes());
    b.extend([0x33u8; 16]);
    let y = dequantized(GgmlType::Q5_0, &b, 32);
    for (j, &v) in y.iter().enumerate() {
        let q = if j % 2 == 0 { 19.0 } else { 3.0 };
        assert_eq!(v, (q - 16.0) * 2.0, "elem {j}");
    }
}

#[test]
fn q8_blocks_dequantize_exactly() {
    let qs: Vec<u8> = (0..32).map(|j| (j as i8 - 16) as u8).collect();
    let mut q8_0 = h(0.125).to_vec();
    q8_0.extend(&qs);
    let mut q8_1 = h(0.125).to_vec();
    q8_1.extend(h(-2.0)); // s is only used by dot products
    q8_1.extend(&qs);
    let want: Vec<f32> = (0..32).map(|j| (j as f32 - 16.0) * 0.125).collect();
    assert_eq!(dequantized(GgmlType::Q8_0, &q8_0, 32), want);
    assert_eq!(dequantized(GgmlType::Q8_1, &q8_1, 32), want);

    let mut q8_k = 0.5f32.to_le_bytes().to_vec();
    q8_k.extend((0..256i32).map(|j| (j % 200 - 100) as i8 as u8));
    q8_k.extend([0u8; 32]);
    let y = dequantized(GgmlType::Q8_K, &q8_k, 256);
    for (j, &v) in y.iter().enumerate() {
        assert_eq!(v, ((j % 200) as f32 - 100.0) * 0.5);
    }
}

#[test]
fn q4_k_block_dequantizes_exactly() {
    // Sub-block j gets scale 8j + 3 and min 2j + 40 (6 bits each; j >= 4 use the packed high
    // bits).
    let (sc, mn): (Vec<u8>, Vec<u8>) = (0..8u8).map(|j| (8 * j + 3, 2 * j + 40)).unzip();
    let mut s = [0u8; 12];
    for j in 0..8 {
        if j < 4 {
            s[j] = sc[j];
            s[j + 4] = mn[j];
        } else {
            s[j + 4] = (sc[j] & 0xF) | ((mn[j] & 0xF) << 4);
            s[j - 4] |= (sc[j] >> 4) << 6;
            s[j] |= (mn[j] >> 4) << 6;
        }
    }
    let mut b = h(0.5).to_vec();
    b.extend(h(0.25));
    b.extend(s);
    // 64-element chunk c: byte l holds elem 64c+l (low nibble) and 64c+32+l (high).
    b.extend((0..128).map(|i| ((i % 16) as u8) | ((((i / 16) % 16) as u8) << 4)));
    let y = dequantized(GgmlType::Q4_K, &b, 256);
    for c in 0..4 {
        for l in 0..32 {
            let byte = 32 * c + l;
            let (lo, hi) = ((byte % 16) as f32, ((byte / 16) % 16) as f32);
            let (j0, j1) = (2 * c, 2 * c + 1);
            assert_eq!(
                y[64 * c + l],
                0.5 * sc[j0] as f32 * lo - 0.25 * mn[j0] as f32
            );
            assert_eq!(
                y[64 * c + 32 + l],
                0.5 * sc[j1] as f32 * hi - 0.25 * mn[j1] as f32
            );
        }
    }
}

#[test]
fn q6_k_block_dequantizes_exactly() {
    // Choose each element's 6-bit quant L(i) = (7 i) % 64, pack it, and check d sc (L - 32).
    let l = |i: usize| ((7 * i) % 64) as u8;
    let mut ql = [0u8; 128];
    let mut qh = [0u8; 64];
    for half in 0..2 {
        for i in 0..32 {
            let e = 128 * half + i;
            let (q1, q2, q3, q4) = (l(e), l(e + 32), l(e + 64), l(e + 96));
            ql[64 * half + i] = (q1 & 0xF) | ((q3 & 0xF) << 4);
            ql[64 * half + i + 32] = (q2 & 0xF) | ((q4 & 0xF) << 4);
            qh[32 * half + i] = (q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6);
        }
    }
    let scales: Vec<i8> = (0..16).map(|i| (i * 9 - 70) as i8).collect();
    let mut b = ql.to_vec();
    b.extend(qh);
    b.extend(scales.iter().map(|&s| s as u8));
    b.extend(h(0.5));
    let y = dequantized(GgmlType::Q6_K, &b, 256);
    for (i, &v) in y.iter().enumerate() {
        assert_eq!(
            v,
            0.5 * scales[i / 16] as f32 * (l(i) as f32 - 32.0),
            "elem {i}"
        );
    }
}

// ---------------------------------------------------------------- round trips

/// Root-mean-square error relative to the data's RMS, and max error relative to max |x|.
fn round_trip_errors(ty: GgmlType, x: &[f32]) -> (f64, f64) {
    let y = dequantized(ty, &quantized(ty, x), x.len());
    let (mut se, mut sx, mut max_err) = (0.0f64, 0.0f64, 0.0f64);
    for (&a, &b) in x.iter().zip(&y) {
        let e = (a - b) as f64;
        se += e * e;
        sx += (a as f64) * (a as f64);
        max_err = max_err.max(e.abs());
    }
    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs())) as f64;
    ((se / sx).sqrt(), max_err / amax)
}

#[test]
fn quantize_dequantize_error_is_bounded() {
    // (type, max relative RMSE, max error / max|x|) for uniform data; 4-bit steps are 1/8 of
    // the block range (1/16 with a min), 5-bit 1/16, 6-bit 1/32, 8-bit 1/127.
    let bounds = [
        (GgmlType::F32, 0.0, 0.0),
        (GgmlType::F16, 1e-3, 1e-3),
        (GgmlType::BF16, 5e-3, 5e-3),
        (GgmlType::Q4_0, 0.08, 0.13),
        (GgmlType::Q4_1, 0.08, 0.075),
        (GgmlType::Q5_0, 0.045, 0.07),
        (GgmlType::Q8_0, 0.006, 0.005),
        (GgmlType::Q8_1, 0.006, 0.005),
        (GgmlType::Q4_K, 0.07, 0.1),
        (GgmlType::Q6_K, 0.02, 0.025),
        (GgmlType::Q8_K, 0.006, 0.0045),
        (GgmlType::Q5_1, 0.04, 0.04),
        (GgmlType::Q2_K, 0.35, 0.5),
        (GgmlType::Q3_K, 0.17, 0.3),
        (GgmlType::Q5_K, 0.035, 0.07),
        (GgmlType::IQ4_NL, 0.08, 0.13),
        (GgmlType::IQ4_XS, 0.08, 0.15),
    ];
    let mut rng = StdRng::seed_from_u64(1);
    for (ty, max_rmse, max_err) in bounds {
        // Not much smaller than 0.05: Q8_0's d = amax / 127 then falls into f16 subnormals
        // and loses bits (as it does in ggml).
        for scale in [0.05f32, 1.0, 300.0] {
            let x = random_row(&mut rng, 4096, scale);
            let (rmse, err) = round_trip_errors(ty, &x);
            assert!(
                rmse <= max_rmse,
                "{ty} scale {scale}: relative RMSE {rmse} > {max_rmse}"
            );
            assert!(
                err <= max_err,
                "{ty} scale {scale}: max error {err} > {max_err}"
            );
        }
    }
}

#[test]
fn quantize_handles_zero_and_constant_rows() {
    for ty in ALL_TYPES {
        let n = 512;
        assert_eq!(
            dequantized(ty, &quantized(ty, &vec![0.0; n]), n),
            vec![0.0; n],
            "{ty}"
        );
        let c = vec![0.75f32; n];
        let (rmse, _) = round_trip_errors(ty, &c);
        assert!(rmse < 0.02, "{ty}: constant row RMSE {rmse}");
    }
}

// ---------------------------------------------------------------- dot products

/// f64 dot of the dequantized rows, and the sum of |terms| to scale tolerances by.
fn dequantized_dot(ty: GgmlType, w: &[u8], vdt: GgmlType, a: &[u8], n: usize) -> (f64, f64) {
    let (wf, af) = (dequantized(ty, w, n), dequantized(vdt, a, n));
    let dot = wf.iter().zip(&af).map(|(&p, &q)| p as f64 * q as f64).sum();
    let mag = wf
        .iter()
        .zip(&af)
        .map(|(&p, &q)| (p as f64 * q as f64).abs())
        .sum();
    (dot, mag)
}

#[test]
fn vec_dot_matches_scalar_and_dequantized_reference_on_every_level() {
    let mut rng = StdRng::seed_from_u64(2);
    for ty in WEIGHT_TYPES {
        let vdt = ty.vec_dot_type().unwrap();
        for n in [256, 512, 2048] {
            let w = quantized(ty, &random_row(&mut rng, n, 0.5));
            let x = random_row(&mut rng, n, 3.0);
            let mut a = vec![0u8; vdt.row_bytes(n).unwrap()];
            quantize_activations(vdt, &x, &mut a);
            let (want, mag) = dequantized_dot(ty, &w, vdt, &a, n);
            let scalar = vec_dot(SimdLevel::Scalar, ty, &w, &a);
            // Integer dots are exact; only f32 scale products and sums round. Q4_1's min term
            // uses the activation sum stored as f16 (2^-11 relative).
            let tol = if matches!(ty, GgmlType::Q4_1 | GgmlType::Q5_1) {
                1e-3
            } else {
                1e-5
            } * mag;
            assert!(
                (scalar as f64 - want).abs() <= tol,
                "{ty} n {n}: scalar {scalar} vs dequantized {want}"
            );
            for level in cpu::available_levels() {
                let got = vec_dot(level, ty, &w, &a);
                assert!(
                    (got - scalar).abs() as f64 <= 1e-5 * mag,
                    "{ty} n {n} {level:?}: {got} vs scalar {scalar}"
                );
            }
        }
    }
}

#[test]
fn float_vec_dot_handles_lengths_off_the_simd_width() {
    let mut rng = StdRng::seed_from_u64(3);
    for ty in [GgmlType::F32, GgmlType::F16, GgmlType::BF16] {
        for n in [1, 7, 9, 31, 100] {
            let w = quantized(ty, &random_row(&mut rng, n, 1.0));
            let a = quantized(GgmlType::F32, &random_row(&mut rng, n, 1.0));
            let (want, mag) = dequantized_dot(ty, &w, GgmlType::F32, &a, n);
            for level in cpu::available_levels() {
                let got = vec_dot(level, ty, &w, &a) as f64;
                assert!((got - want).abs() <= 1e-5 * mag, "{ty} n {n} {level:?}");
            }
        }
    }
}

#[test]
fn activation_quantizers_round_ties_to_even_and_keep_block_sums() {
    // x * (127 / amax) = 2.5 exactly for x = 2.5 with amax = 127: ggml-cpu's AVX2 path rounds
    // that to 2, the reference quantizer (roundf) to 3.
    let mut x = vec![0.0f32; 32];
    x[0] = 127.0;
    x[1] = 2.5;
    x[2] = -3.5;
    let mut a = vec![0u8; 34];
    quantize_activations(GgmlType::Q8_0, &x, &mut a);
    assert_eq!((a[2] as i8, a[3] as i8, a[4] as i8), (127, 2, -4));
    let r = quantized(GgmlType::Q8_0, &x);
    assert_eq!((r[3] as i8, r[4] as i8), (3, -4));

    let mut a1 = vec![0u8; 36];
    quantize_activations(GgmlType::Q8_1, &x, &mut a1);
    let s = f16::from_le_bytes([a1[2], a1[3]]).to_f32();
    assert_eq!(s, 125.0, "s = d * (127 + 2 - 4)");

    let xk = random_row(&mut StdRng::seed_from_u64(4), 256, 1.0);
    let qk = quantized(GgmlType::Q8_K, &xk);
    for j in 0..16 {
        let sum: i32 = qk[4 + 16 * j..20 + 16 * j]
            .iter()
            .map(|&q| q as i8 as i32)
            .sum();
        assert_eq!(
            i16::from_le_bytes([qk[260 + 2 * j], qk[261 + 2 * j]]) as i32,
            sum
        );
    }
}

#[test]
fn activation_quantizers_agree_bit_for_bit_on_every_level() {
    let mut rng = StdRng::seed_from_u64(5);
    for vdt in [
        GgmlType::Q8_0,
        GgmlType::Q8_1,
        GgmlType::Q8_K,
        GgmlType::F32,
    ] {
        for scale in [1e-3f32, 1.0, 1e3] {
            let mut x = random_row(&mut rng, 1024, scale);
            x[96..128].fill(0.0); // an all-zero block
            // A Q8_K block whose largest |x| occurs with both signs: the first one wins.
            x[256 + 5] = -2.0 * scale;
            x[256 + 9] = 2.0 * scale;
            let mut want = vec![0u8; vdt.row_bytes(x.len()).unwrap()];
            quantize_activations_at(SimdLevel::Scalar, vdt, &x, &mut want);
            for level in cpu::available_levels() {
                let mut got = vec![0u8; want.len()];
                quantize_activations_at(level, vdt, &x, &mut got);
                assert!(got == want, "{vdt} {level:?} scale {scale}");
            }
        }
    }
}
