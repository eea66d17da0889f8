//! Packed (8-row interleaved) matmul: bit-identical to its scalar reference over the packed
//! bytes, the same for a row alone or in any batch, and close to the plain-layout matmul.
#![allow(clippy::unwrap_used)]

use pagoda_kernels::cpu::{SimdLevel, available_levels};
use pagoda_kernels::matmul::{MatmulScratch, matmul_at, matmul_packed, matmul_packed_into};
use pagoda_kernels::quant::packed::PackedMatrix;
use pagoda_kernels::quant::{GgmlType, quantize_row};

fn data(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2_654_435_761) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s % 2001) as f32 / 1000.0 - 1.0
        })
        .collect()
}

/// Types with packed kernels, and a `k` that is a whole number of their blocks.
const TYPES: [(GgmlType, usize); 5] = [
    (GgmlType::Q8_0, 320),
    (GgmlType::Q4_1, 320),
    (GgmlType::Q5_0, 320),
    (GgmlType::Q4_K, 512),
    (GgmlType::Q6_K, 512),
];

fn weights(ty: GgmlType, n: usize, k: usize) -> Vec<u8> {
    let wf = data(n * k, 3);
    let rb = ty.row_bytes(k).unwrap();
    let mut w = vec![0u8; n * rb];
    for r in 0..n {
        quantize_row(ty, &wf[r * k..(r + 1) * k], &mut w[r * rb..(r + 1) * rb]);
    }
    w
}

/// A packed `n x k` matrix of type `ty`, `t` activation rows (seed `seed`), and the scalar
/// reference's product over the packed bytes: `None` where the type has no packed kernels.
fn packed_case(
    ty: GgmlType,
    n: usize,
    k: usize,
    t: usize,
    seed: u32,
) -> Option<(PackedMatrix, Vec<f32>, Vec<f32>)> {
    let w = weights(ty, n, k);
    let p = PackedMatrix::pack_at(SimdLevel::Avx2, ty, n, k, &w)?;
    let a_row = p.activation_row_bytes();
    let x = data(t * k, seed);
    let mut act = vec![0u8; t * a_row];
    for (xr, ar) in x.chunks_exact(k).zip(act.chunks_exact_mut(a_row)) {
        p.quantize_activations(xr, ar);
    }
    let mut want = vec![0.0f32; t * n];
    p.reference_matmul(&act, t, &mut want);
    Some((p, x, want))
}

fn avx2() -> bool {
    available_levels().contains(&SimdLevel::Avx2)
}

#[test]
fn packed_matches_reference_bit_for_bit_and_is_batch_invariant() {
    if !avx2() {
        return;
    }
    for (ty, k) in TYPES {
        // 44 rows: five full groups and a partial one.
        let n = 44;
        // 37 rows take the unpacked kernels where a type has them (8 rows or more) and span
        // two panels of 32 rows; the batches below take the packed ones: all must give the
        // reference's bits.
        let t = 37;
        let Some((p, x, want)) = packed_case(ty, n, k, t, 7) else {
            continue;
        };
        let w = weights(ty, n, k);

        let mut scratch = MatmulScratch::default();
        let mut got = vec![0.0f32; t * n];
        matmul_packed(&p, &x, t, &mut got, &mut scratch);
        for i in 0..t * n {
            assert_eq!(
                got[i].to_bits(),
                want[i].to_bits(),
                "{ty} at {i}: {} vs {}",
                got[i],
                want[i]
            );
        }
        // Any batch size (which changes the kernels' row count) gives the same rows.
        for t2 in [1, 2, 3, 5] {
            let mut part = vec![0.0f32; t2 * n];
            matmul_packed(&p, &x[..t2 * k], t2, &mut part, &mut scratch);
            for i in 0..t2 * n {
                assert_eq!(part[i].to_bits(), want[i].to_bits(), "{ty} t={t2} at {i}");
            }
        }
        // Close to the plain-layout product (a different f32 summation order).
        let mut plain = vec![0.0f32; t * n];
        matmul_at(
            SimdLevel::Avx2,
            &w,
            ty,
            n,
            k,
            &x,
            t,
            &mut plain,
            &mut scratch,
        );
        for i in 0..t * n {
            let tol = 1e-4 * (1.0 + plain[i].abs()) * k as f32 / 32.0;
            assert!(
                (got[i] - plain[i]).abs() <= tol,
                "{ty} at {i}: {} vs {}",
                got[i],
                plain[i]
            );
        }
    }
}

/// Every row count a verify step or a small batch gives (1..=16, the kernels' 1..=8-row calls
/// and their tails), and the first prompt-sized ones past it: each output has the scalar
/// reference's bits, for every packed type, over a partial last group.
#[test]
fn every_row_count_up_to_18_matches_reference() {
    if !avx2() {
        return;
    }
    for (ty, k) in TYPES {
        let n = 44;
        let t_max = 18;
        let Some((p, x, want)) = packed_case(ty, n, k, t_max, 13) else {
            continue;
        };
        let mut scratch = MatmulScratch::default();
        for t in 1..=t_max {
            let mut got = vec![0.0f32; t * n];
            matmul_packed(&p, &x[..t * k], t, &mut got, &mut scratch);
            for i in 0..t * n {
                assert_eq!(got[i].to_bits(), want[i].to_bits(), "{ty} t={t} at {i}");
            }
        }
    }
}

#[test]
fn types_without_packed_kernels_stay_plain() {
    let w = weights(GgmlType::F32, 8, 64);
    assert!(PackedMatrix::pack_at(SimdLevel::Avx2, GgmlType::F32, 8, 64, &w).is_none());
    let w = weights(GgmlType::Q8_0, 8, 64);
    assert!(PackedMatrix::pack_at(SimdLevel::Scalar, GgmlType::Q8_0, 8, 64, &w).is_none());
}

/// One-row products over matrices large enough to be split into many tasks, each reading its
/// groups as several streams (`packed::GemvFn`, where a type has one) plus a remainder: every
/// output has the scalar reference's bits.
#[test]
fn one_row_products_match_reference_at_every_split() {
    if !avx2() {
        return;
    }
    for (ty, k) in TYPES {
        // 1,100 rows: 137 full groups and a partial one, over 64 KB for every type, so the
        // product is split across the pool's tasks with runs of several groups each.
        let n = 1100;
        let w = weights(ty, n, k);
        let Some(p) = PackedMatrix::pack_at(SimdLevel::Avx2, ty, n, k, &w) else {
            continue;
        };
        let x = data(k, 11);
        let mut act = vec![0u8; p.activation_row_bytes()];
        p.quantize_activations(&x, &mut act);
        let mut want = vec![0.0f32; n];
        p.reference_matmul(&act, 1, &mut want);
        let mut got = vec![0.0f32; n];
        matmul_packed(&p, &x, 1, &mut got, &mut MatmulScratch::default());
        for i in 0..n {
            assert_eq!(got[i].to_bits(), want[i].to_bits(), "{ty} row {i}");
        }
    }
}

#[test]
fn split_outputs_hold_the_same_columns_bit_for_bit() {
    if !avx2() {
        return;
    }
    // Column parts as the models stack them (q | k | v, gate | up), the last one ragged.
    let splits: [&[usize]; 3] = [&[576, 192, 196], &[48, 8, 908], &[960, 4]];
    for (ty, k) in TYPES {
        let n = 964;
        let w = weights(ty, n, k);
        let Some(p) = PackedMatrix::pack_at(SimdLevel::Avx2, ty, n, k, &w) else {
            continue;
        };
        for t in [1usize, 5, 40] {
            let x = data(t * k, 13);
            let mut whole = vec![0.0f32; t * n];
            matmul_packed(&p, &x, t, &mut whole, &mut MatmulScratch::default());
            for widths in splits {
                let mut parts: Vec<Vec<f32>> =
                    widths.iter().map(|w| vec![f32::NAN; t * w]).collect();
                let mut outs: Vec<&mut [f32]> = parts.iter_mut().map(|v| &mut v[..]).collect();
                matmul_packed_into(&p, &x, t, &mut outs, &mut MatmulScratch::default());
                let mut start = 0;
                for (part, &wd) in parts.iter().zip(widths) {
                    for r in 0..t {
                        for c in 0..wd {
                            let (got, want) = (part[r * wd + c], whole[r * n + start + c]);
                            assert_eq!(
                                got.to_bits(),
                                want.to_bits(),
                                "{ty} t {t} split {widths:?}: row {r} column {}",
                                start + c
                            );
                        }
                    }
                    start += wd;
                }
            }
        }
    }
}

/// The AVX-VNNI Q8_0 kernels (offset activations, `vpdpbusd`) give the AVX2 kernels' bits, on
/// random rows and on rows at the quantizer's extremes (every product +-127 x +-127, where a
/// 16-bit intermediate would saturate), at every row count a kernel call takes.
#[test]
fn q8_0_vnni_and_avx2_kernels_agree_bit_for_bit() {
    if !avx2() || !pagoda_kernels::cpu::avx_vnni() {
        return;
    }
    let (n, k) = (40, 384);
    let mut wf = data(n * k, 11);
    // Rows 0-7: all +-1 (each block quantizes to +-127); x's rows alike below.
    for (i, v) in wf[..8 * k].iter_mut().enumerate() {
        *v = if (i / 3) % 2 == 0 { 1.0 } else { -1.0 };
    }
    let rb = GgmlType::Q8_0.row_bytes(k).unwrap();
    let mut w = vec![0u8; n * rb];
    for r in 0..n {
        quantize_row(
            GgmlType::Q8_0,
            &wf[r * k..(r + 1) * k],
            &mut w[r * rb..(r + 1) * rb],
        );
    }
    let p = PackedMatrix::pack_at(SimdLevel::Avx2, GgmlType::Q8_0, n, k, &w).unwrap();
    let t = 23;
    let mut x = data(t * k, 5);
    for (i, v) in x[..4 * k].iter_mut().enumerate() {
        *v = if (i / 5) % 3 == 0 { -1.0 } else { 1.0 };
    }
    let mut scratch = MatmulScratch::default();
    let run = |vnni: bool, t: usize, scratch: &mut MatmulScratch| {
        pagoda_kernels::cpu::set_avx_vnni(vnni);
        let mut y = vec![0.0f32; t * n];
        matmul_packed(&p, &x[..t * k], t, &mut y, scratch);
        y
    };
    for t in [2, 3, 4, 5, 23] {
        let fast = run(true, t, &mut scratch);
        let plain = run(false, t, &mut scratch);
        pagoda_kernels::cpu::set_avx_vnni(true);
        let same = fast
            .iter()
            .zip(&plain)
            .all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "t = {t}: the VNNI kernels' bits differ from AVX2's");
    }
}
