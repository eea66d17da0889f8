//! Element-wise ops: every SIMD variant against the scalar reference (random data, odd
//! lengths), RoPE against the direct ggml formula, and the thread pool's contract.
#![allow(clippy::unwrap_used)] // tests may unwrap

use pagoda_kernels::cpu::{SimdLevel, available_levels};
use pagoda_kernels::ops::{self, Rope, RopeStyle};
use pagoda_kernels::parallel;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use std::sync::atomic::{AtomicUsize, Ordering};

const LENGTHS: [usize; 10] = [1, 3, 7, 8, 9, 31, 64, 100, 576, 2053];

fn random_vec(rng: &mut StdRng, n: usize, lo: f32, hi: f32) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(lo..hi)).collect()
}

/// `|a - b| <= abs + rel * |b|` element-wise, with the failing index in the message.
fn assert_close(got: &[f32], want: &[f32], abs: f32, rel: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= abs + rel * w.abs(),
            "{what}[{i}]: got {g}, want {w}"
        );
    }
}

fn simd_levels() -> Vec<SimdLevel> {
    available_levels()
        .into_iter()
        .filter(|&l| l != SimdLevel::Scalar)
        .collect()
}

#[test]
fn rms_norm_variants_match_scalar_and_definition() {
    let mut rng = StdRng::seed_from_u64(1);
    for n in LENGTHS {
        let x = random_vec(&mut rng, n, -3.0, 3.0);
        let w = random_vec(&mut rng, n, -2.0, 2.0);
        let eps = 1e-5;
        let mean_sq = x.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>() / n as f64;
        let inv = 1.0 / (mean_sq + f64::from(eps)).sqrt();
        let exact: Vec<f32> = x
            .iter()
            .zip(&w)
            .map(|(&a, &b)| (f64::from(a) * inv * f64::from(b)) as f32)
            .collect();
        let mut scalar = vec![0.0; n];
        ops::rms_norm_with(SimdLevel::Scalar, &x, &w, eps, &mut scalar);
        assert_close(&scalar, &exact, 1e-6, 1e-5, "rms_norm scalar vs f64");
        for level in simd_levels() {
            let mut out = vec![0.0; n];
            ops::rms_norm_with(level, &x, &w, eps, &mut out);
            assert_close(&out, &scalar, 1e-7, 1e-6, "rms_norm simd");
            let mut inplace = x.clone();
            ops::rms_norm_inplace_with(level, &mut inplace, &w, eps);
            assert_close(&inplace, &scalar, 1e-7, 1e-6, "rms_norm_inplace simd");
        }
    }
}

#[test]
fn rms_norm_rows_normalises_each_row() {
    let mut rng = StdRng::seed_from_u64(2);
    let (rows, d) = (5, 256);
    let mut x = random_vec(&mut rng, rows * d, -1.0, 1.0);
    let w = random_vec(&mut rng, d, 0.5, 1.5);
    let expect: Vec<f32> = x
        .chunks(d)
        .flat_map(|r| {
            let mut o = vec![0.0; d];
            ops::rms_norm(r, &w, 1e-6, &mut o);
            o
        })
        .collect();
    ops::rms_norm_rows(&mut x, &w, 1e-6);
    assert_eq!(x, expect);
}

#[test]
fn activations_match_scalar_and_formula() {
    let mut rng = StdRng::seed_from_u64(3);
    for n in LENGTHS {
        // Wide range: saturating tails and the region where 1 + tanh cancels.
        let gate = random_vec(&mut rng, n, -12.0, 12.0);
        let up = random_vec(&mut rng, n, -2.0, 2.0);
        let silu_exact: Vec<f32> = gate
            .iter()
            .zip(&up)
            .map(|(&g, &u)| (f64::from(g) / (1.0 + (-f64::from(g)).exp()) * f64::from(u)) as f32)
            .collect();
        let gelu_exact: Vec<f32> = gate
            .iter()
            .zip(&up)
            .map(|(&g, &u)| {
                let g = f64::from(g);
                let t = (2.0 / std::f64::consts::PI).sqrt() * (g + 0.044715 * g * g * g);
                (0.5 * g * (1.0 + t.tanh()) * f64::from(u)) as f32
            })
            .collect();
        for level in available_levels() {
            let mut s = gate.clone();
            ops::silu_mul_with(level, &mut s, &up);
            assert_close(&s, &silu_exact, 1e-6, 2e-6, "silu_mul");
            let mut g = gate.clone();
            ops::gelu_tanh_mul_with(level, &mut g, &up);
            // The scalar ggml form loses ~1e-6 absolute to cancellation in 1 + tanh(u).
            assert_close(&g, &gelu_exact, 2e-6, 2e-6, "gelu_tanh_mul");
        }
    }
}

#[test]
fn softmax_matches_scalar_and_masks_neg_infinity() {
    let mut rng = StdRng::seed_from_u64(4);
    for n in LENGTHS.into_iter().chain([49152]) {
        let mut x = random_vec(&mut rng, n, -30.0, 30.0);
        if n > 2 {
            x[1] = f32::NEG_INFINITY;
        }
        let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let denom: f64 = x
            .iter()
            .map(|&v| (f64::from(v) - f64::from(max)).exp())
            .sum();
        let exact: Vec<f32> = x
            .iter()
            .map(|&v| ((f64::from(v) - f64::from(max)).exp() / denom) as f32)
            .collect();
        for level in available_levels() {
            let mut y = x.clone();
            ops::softmax_inplace_with(level, &mut y);
            assert_close(&y, &exact, 1e-9, 2e-6, "softmax");
            if n > 2 {
                assert_eq!(y[1], 0.0, "masked entry");
            }
            let total: f64 = y.iter().map(|&v| f64::from(v)).sum();
            assert!((total - 1.0).abs() < 1e-5, "softmax sums to {total}");
        }
    }
}

#[test]
fn add_and_scale_match_scalar() {
    let mut rng = StdRng::seed_from_u64(5);
    for n in LENGTHS {
        let x = random_vec(&mut rng, n, -5.0, 5.0);
        let y = random_vec(&mut rng, n, -5.0, 5.0);
        for level in available_levels() {
            let mut a = x.clone();
            ops::add_inplace_with(level, &mut a, &y);
            let want: Vec<f32> = x.iter().zip(&y).map(|(p, q)| p + q).collect();
            assert_eq!(a, want);
            ops::scale_inplace_with(level, &mut a, 0.37);
            let want: Vec<f32> = want.iter().map(|v| v * 0.37).collect();
            assert_eq!(a, want);
        }
    }
}

/// ggml rope: pair i rotated by theta_i = pos * base^(-2i/n_rot); NORM pairs (2i, 2i+1),
/// NEOX pairs (i, i + n_rot/2); dims >= n_rot untouched.
fn rope_reference(
    x: &[f32],
    head_dim: usize,
    n_rot: usize,
    base: f32,
    style: RopeStyle,
    pos: u32,
) -> Vec<f32> {
    let mut y: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
    for head in y.chunks_mut(head_dim) {
        for i in 0..n_rot / 2 {
            let theta = f64::from(pos) * f64::from(base).powf(-2.0 * i as f64 / n_rot as f64);
            let (a, b) = match style {
                RopeStyle::Norm => (2 * i, 2 * i + 1),
                RopeStyle::Neox => (i, i + n_rot / 2),
            };
            let (xa, xb) = (head[a], head[b]);
            head[a] = xa * theta.cos() - xb * theta.sin();
            head[b] = xa * theta.sin() + xb * theta.cos();
        }
    }
    y.into_iter().map(|v| v as f32).collect()
}

#[test]
fn rope_matches_direct_formula_for_both_styles() {
    let mut rng = StdRng::seed_from_u64(6);
    let configs = [
        (64, 64, 100_000.0),
        (256, 256, 1_000_000.0),
        (256, 256, 10_000.0),
        (128, 64, 10_000.0),
        (16, 10, 10_000.0),
    ];
    for (head_dim, n_rot, base) in configs {
        for style in [RopeStyle::Norm, RopeStyle::Neox] {
            let rope = Rope::new(head_dim, n_rot, base, style);
            for pos in [0u32, 1, 7, 511, 4099, 32767] {
                let n_heads = 3;
                let x = random_vec(&mut rng, n_heads * head_dim, -2.0, 2.0);
                let want = rope_reference(&x, head_dim, n_rot, base, style, pos);
                for level in available_levels() {
                    let mut y = x.clone();
                    rope.apply_with(level, &mut y, n_heads, pos);
                    assert_close(
                        &y,
                        &want,
                        2e-6,
                        1e-6,
                        &format!("rope {style:?} hd{head_dim} rot{n_rot} pos{pos} {level:?}"),
                    );
                }
            }
        }
    }
}

#[test]
fn rope_with_precomputed_angles_is_bit_identical() {
    let mut rng = StdRng::seed_from_u64(8);
    // Pair counts below, at and past the 64-pair angle chunk, whole and ragged multiples of 8.
    for (head_dim, n_rot) in [(64, 64), (256, 256), (16, 10), (300, 300), (200, 146)] {
        for style in [RopeStyle::Norm, RopeStyle::Neox] {
            let rope = Rope::new(head_dim, n_rot, 10_000.0, style);
            let (mut cos, mut sin) = (vec![0.0; rope.pairs()], vec![0.0; rope.pairs()]);
            for pos in [0u32, 5, 4099] {
                let q = random_vec(&mut rng, 4 * head_dim, -2.0, 2.0);
                let k = random_vec(&mut rng, 2 * head_dim, -2.0, 2.0);
                let (mut q1, mut k1, mut q2, mut k2) = (q.clone(), k.clone(), q, k);
                rope.apply_qk(&mut q1, 4, &mut k1, 2, pos);
                rope.angles(pos, &mut cos, &mut sin);
                rope.apply_qk_at(&mut q2, 4, &mut k2, 2, &cos, &sin);
                let what = format!("{style:?} hd{head_dim} rot{n_rot} pos{pos}");
                assert_eq!(q1, q2, "{what}: q");
                assert_eq!(k1, k2, "{what}: k");
            }
        }
    }
}

#[test]
fn rope_qk_rotates_q_and_k_as_two_separate_calls() {
    let mut rng = StdRng::seed_from_u64(7);
    for style in [RopeStyle::Norm, RopeStyle::Neox] {
        let rope = Rope::new(64, 64, 10_000.0, style);
        let (q, k) = (
            random_vec(&mut rng, 9 * 64, -2.0, 2.0),
            random_vec(&mut rng, 3 * 64, -2.0, 2.0),
        );
        let (mut q1, mut k1, mut q2, mut k2) = (q.clone(), k.clone(), q, k);
        rope.apply(&mut q1, 9, 777);
        rope.apply(&mut k1, 3, 777);
        rope.apply_qk(&mut q2, 9, &mut k2, 3, 777);
        assert_eq!(q1, q2, "{style:?} q");
        assert_eq!(k1, k2, "{style:?} k");
    }
}

#[test]
fn pool_sums_over_many_tasks() {
    let hits: Vec<AtomicUsize> = (0..10_000).map(|_| AtomicUsize::new(0)).collect();
    let total = AtomicUsize::new(0);
    parallel::run(hits.len(), &|i| {
        hits[i].fetch_add(1, Ordering::Relaxed);
        total.fetch_add(i, Ordering::Relaxed);
    });
    assert!(
        hits.iter().all(|h| h.load(Ordering::Relaxed) == 1),
        "every task runs exactly once"
    );
    assert_eq!(total.load(Ordering::Relaxed), 10_000 * 9_999 / 2);
}

#[test]
fn for_rows_hands_each_row_of_every_buffer_to_exactly_one_run() {
    parallel::for_rows(0, [&mut [0u32; 0][..]], &|_, _| panic!("no rows, no call"));
    // Small (inline) and large (split over the pool) shapes, with rows of different widths.
    for rows in [1usize, 3, 64, 1000, 4099] {
        let (wa, wb) = (40usize, 7usize);
        let mut a = vec![0u32; rows * wa];
        let mut b = vec![0u32; rows * wb];
        let runs = AtomicUsize::new(0);
        parallel::for_rows(rows, [&mut a[..], &mut b[..]], &|r, [pa, pb]| {
            assert_eq!(pa.len(), r.len() * wa, "rows {rows}: part of a");
            assert_eq!(pb.len(), r.len() * wb, "rows {rows}: part of b");
            for (i, row) in r.clone().zip(pa.chunks_exact_mut(wa)) {
                row.iter_mut().for_each(|v| *v += i as u32 + 1);
            }
            for (i, row) in r.clone().zip(pb.chunks_exact_mut(wb)) {
                row.iter_mut().for_each(|v| *v += i as u32 + 1);
            }
            runs.fetch_add(1, Ordering::Relaxed);
        });
        for (i, row) in a.chunks_exact(wa).enumerate() {
            assert!(
                row.iter().all(|&v| v == i as u32 + 1),
                "rows {rows}: a row {i}"
            );
        }
        for (i, row) in b.chunks_exact(wb).enumerate() {
            assert!(
                row.iter().all(|&v| v == i as u32 + 1),
                "rows {rows}: b row {i}"
            );
        }
        let runs = runs.load(Ordering::Relaxed);
        if rows * (wa + wb) >= 32 * 1024 && parallel::num_threads() > 1 {
            assert!(runs > 1, "rows {rows}: a large pass was not split");
        } else {
            assert_eq!(runs, 1, "rows {rows}: a small pass was split");
        }
    }
}

#[test]
fn pool_nested_call_runs_inline() {
    let total = AtomicUsize::new(0);
    parallel::run(8, &|i| {
        let outer = std::thread::current().id();
        parallel::run(5, &|j| {
            assert_eq!(
                std::thread::current().id(),
                outer,
                "nested task left its thread"
            );
            total.fetch_add(i * 10 + j, Ordering::Relaxed);
        });
    });
    let want: usize = (0..8).flat_map(|i| (0..5).map(move |j| i * 10 + j)).sum();
    assert_eq!(total.load(Ordering::Relaxed), want);
}

#[test]
fn pool_survives_many_calls_and_concurrent_callers() {
    std::thread::scope(|scope| {
        for caller in 0..3usize {
            scope.spawn(move || {
                for call in 0..2_000usize {
                    let n = 1 + (call + caller) % 7;
                    let sum = AtomicUsize::new(0);
                    parallel::run(n, &|i| {
                        sum.fetch_add(i + 1, Ordering::Relaxed);
                    });
                    assert_eq!(sum.load(Ordering::Relaxed), n * (n + 1) / 2, "call {call}");
                }
            });
        }
    });
    assert!(parallel::num_threads() >= 1);
}

#[test]
fn pool_reraises_task_panics_after_all_tasks_finish() {
    let done = AtomicUsize::new(0);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        parallel::run(16, &|i| {
            if i == 3 {
                panic!("task 3 fails");
            }
            done.fetch_add(1, Ordering::Relaxed);
        });
    }));
    assert!(result.is_err());
    assert_eq!(done.load(Ordering::Relaxed), 15);
    let sum = AtomicUsize::new(0);
    parallel::run(4, &|i| {
        sum.fetch_add(i, Ordering::Relaxed);
    });
    assert_eq!(
        sum.load(Ordering::Relaxed),
        6,
        "pool still works after a panic"
    );
}
