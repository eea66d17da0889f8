//! matmul against a naive dequantize-then-f64 reference, on every SIMD level, for token counts
//! that exercise the 4-row kernels and their remainders, and row counts that do not divide into
//! the thread chunks.

#![allow(clippy::unwrap_used)] // tests may unwrap

use pagoda_kernels::cpu::{self, SimdLevel};
use pagoda_kernels::matmul::{MatmulScratch, matmul, matmul_at};
use pagoda_kernels::quant::{GgmlType, dequantize_row, quantize_activations, quantize_row};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

const WEIGHT_TYPES: [GgmlType; 9] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q8_0,
    GgmlType::Q4_K,
    GgmlType::Q6_K,
];

struct Case {
    w: Vec<u8>,
    /// W dequantized, [n][k].
    wf: Vec<f32>,
    x: Vec<f32>,
    n: usize,
    k: usize,
    t: usize,
}

fn case(rng: &mut StdRng, ty: GgmlType, n: usize, k: usize, t: usize) -> Case {
    let row = ty.row_bytes(k).unwrap();
    let mut w = vec![0u8; n * row];
    let mut wf = vec![0f32; n * k];
    for r in 0..n {
        let src: Vec<f32> = (0..k).map(|_| rng.random_range(-1.0f32..1.0)).collect();
        quantize_row(ty, &src, &mut w[r * row..(r + 1) * row]);
        dequantize_row(ty, &w[r * row..(r + 1) * row], &mut wf[r * k..(r + 1) * k]);
    }
    let x = (0..t * k).map(|_| rng.random_range(-2.0f32..2.0)).collect();
    Case { w, wf, x, n, k, t }
}

/// `(y, mag)` in f64 with the activations first rounded through `vdt` as the kernels do
/// (`quantized = true`) or left as f32; `mag` is the sum of |terms| per output.
fn reference(c: &Case, ty: GgmlType, quantized: bool) -> (Vec<f64>, Vec<f64>) {
    let vdt = ty.vec_dot_type().unwrap();
    let (mut y, mut mag) = (vec![0f64; c.t * c.n], vec![0f64; c.t * c.n]);
    let mut a = vec![0u8; vdt.row_bytes(c.k).unwrap()];
    let mut xa = vec![0f32; c.k];
    for ti in 0..c.t {
        let xr = &c.x[ti * c.k..(ti + 1) * c.k];
        if quantized {
            quantize_activations(vdt, xr, &mut a);
            dequantize_row(vdt, &a, &mut xa);
        } else {
            xa.copy_from_slice(xr);
        }
        for r in 0..c.n {
            let wr = &c.wf[r * c.k..(r + 1) * c.k];
            for (&p, &q) in wr.iter().zip(&xa) {
                y[ti * c.n + r] += p as f64 * q as f64;
                mag[ti * c.n + r] += (p as f64 * q as f64).abs();
            }
        }
    }
    (y, mag)
}

fn run(level: SimdLevel, ty: GgmlType, c: &Case, scratch: &mut MatmulScratch) -> Vec<f32> {
    let mut y = vec![f32::NAN; c.t * c.n];
    matmul_at(level, &c.w, ty, c.n, c.k, &c.x, c.t, &mut y, scratch);
    y
}

#[test]
fn matmul_matches_dequantized_reference_on_every_level() {
    let mut rng = StdRng::seed_from_u64(10);
    let mut scratch = MatmulScratch::default();
    for ty in WEIGHT_TYPES {
        // n = 37 and 301 are prime-ish: never a multiple of the per-task chunk. 301 x 512 is
        // big enough to go parallel.
        for (n, k) in [(37, 256), (301, 512)] {
            for t in [1, 3, 7, 64] {
                let c = case(&mut rng, ty, n, k, t);
                let (want_q, mag) = reference(&c, ty, true);
                let (want_f, _) = reference(&c, ty, false);
                // Exact integer dots against the quantized activations, up to f32 rounding of
                // scales and partial sums (Q4_1 also carries the f16-rounded block sum).
                let tol = if ty == GgmlType::Q4_1 { 1e-3 } else { 2e-5 };
                for level in cpu::available_levels() {
                    let y = run(level, ty, &c, &mut scratch);
                    for i in 0..t * n {
                        let (got, m) = (y[i] as f64, mag[i]);
                        assert!(
                            (got - want_q[i]).abs() <= tol * m,
                            "{ty} {level:?} n {n} k {k} t {t} out {i}: {got} vs {}",
                            want_q[i]
                        );
                        // Against unquantized activations the 8-bit rounding shows, still
                        // well under 1% of the magnitude.
                        assert!(
                            (got - want_f[i]).abs() <= 1e-2 * m,
                            "{ty} {level:?} f32 ref"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn matmul_uses_best_level_and_reuses_scratch() {
    let mut rng = StdRng::seed_from_u64(11);
    let mut scratch = MatmulScratch::default();
    // A big call, then a small one with the same scratch: stale activation bytes past the
    // small call's rows must not leak into it.
    for (n, k, t) in [(64, 1024, 9), (19, 256, 2)] {
        let c = case(&mut rng, GgmlType::Q8_0, n, k, t);
        let mut y = vec![0f32; t * n];
        matmul(&c.w, GgmlType::Q8_0, n, k, &c.x, t, &mut y, &mut scratch);
        let want = run(
            SimdLevel::Scalar,
            GgmlType::Q8_0,
            &c,
            &mut MatmulScratch::default(),
        );
        let (_, mag) = reference(&c, GgmlType::Q8_0, true);
        for i in 0..t * n {
            assert!((y[i] - want[i]).abs() as f64 <= 2e-5 * mag[i], "out {i}");
        }
    }
}

#[test]
fn matmul_on_empty_shapes_does_nothing() {
    let mut scratch = MatmulScratch::default();
    let mut y: Vec<f32> = vec![];
    matmul(
        &[],
        GgmlType::Q4_1,
        0,
        64,
        &[0.5; 128],
        2,
        &mut y,
        &mut scratch,
    );
    let w = vec![0u8; 3 * 40];
    matmul(&w, GgmlType::Q4_1, 3, 64, &[], 0, &mut y, &mut scratch);
    assert!(y.is_empty());
}
