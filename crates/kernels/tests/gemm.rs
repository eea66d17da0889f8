//! The f32 GEMM (`gemm::gemm_f32_at`) against an f64 reference on random shapes: ragged row
//! counts (every tile height and a partial row block), widths that are not whole 16-column
//! panels, inner dimensions that are not whole `KC` slices; each SIMD level equal to the scalar
//! one bit for bit, and every row equal to the same row run alone (batch invariance).

#![allow(clippy::unwrap_used)] // tests may unwrap

use pagoda_kernels::cpu::{self, SimdLevel};
use pagoda_kernels::gemm::{F32Panels, gemm_f32_at};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

/// (m, n, k): the encoder shapes' k (384, 768, 1152, 3072) and awkward ones around the blocks.
const SHAPES: [(usize, usize, usize); 10] = [
    (1, 16, 384),
    (7, 40, 17),
    (13, 384, 384),
    (97, 100, 300),
    (64, 1152, 384),
    (200, 48, 768),
    (35, 33, 1152),
    (6, 20, 3072),
    (101, 384, 513),
    (12, 3, 257),
];

fn run(level: SimdLevel, p: &F32Panels, x: &[f32], m: usize) -> Vec<f32> {
    let mut y = vec![f32::NAN; m * p.rows()];
    gemm_f32_at(level, p, x, m, &mut y);
    y
}

#[test]
fn gemm_f32_matches_an_f64_reference_on_every_level() {
    let mut rng = StdRng::seed_from_u64(36);
    for (m, n, k) in SHAPES {
        let w: Vec<f32> = (0..n * k).map(|_| rng.random_range(-1.0f32..1.0)).collect();
        let x: Vec<f32> = (0..m * k).map(|_| rng.random_range(-2.0f32..2.0)).collect();
        let p = F32Panels::from_rows(n, k, &w);
        let scalar = run(SimdLevel::Scalar, &p, &x, m);
        for i in 0..m {
            for j in 0..n {
                let (mut want, mut mag) = (0f64, 0f64);
                for kk in 0..k {
                    let t = x[i * k + kk] as f64 * w[j * k + kk] as f64;
                    want += t;
                    mag += t.abs();
                }
                let got = scalar[i * n + j] as f64;
                // f32 rounding of k terms, in any order: a few ulps of the terms' magnitude.
                let tol = 4.0 * f32::EPSILON as f64 * mag.max(1e-30) * (k as f64).sqrt();
                assert!(
                    (got - want).abs() <= tol,
                    "{m}x{n}x{k} ({i}, {j}): {got} vs {want} (tol {tol})"
                );
            }
        }
        for level in cpu::available_levels() {
            let y = run(level, &p, &x, m);
            assert!(
                y.iter()
                    .zip(&scalar)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "{m}x{n}x{k}: {level:?} differs from the scalar tiles"
            );
        }
    }
}

#[test]
fn gemm_f32_rows_do_not_depend_on_the_batch() {
    let mut rng = StdRng::seed_from_u64(7);
    let (m, n, k) = (203, 72, 700);
    let w: Vec<f32> = (0..n * k).map(|_| rng.random_range(-1.0f32..1.0)).collect();
    let x: Vec<f32> = (0..m * k).map(|_| rng.random_range(-2.0f32..2.0)).collect();
    let p = F32Panels::from_rows(n, k, &w);
    let level = cpu::simd_level();
    let all = run(level, &p, &x, m);
    for i in [0, 5, 6, 95, 96, 97, 202] {
        let alone = run(level, &p, &x[i * k..(i + 1) * k], 1);
        assert_eq!(alone, all[i * n..(i + 1) * n], "row {i}");
    }
    // A middle run of rows, starting off the tile and block boundaries.
    let part = run(level, &p, &x[37 * k..150 * k], 113);
    assert_eq!(part, all[37 * n..150 * n]);
}
