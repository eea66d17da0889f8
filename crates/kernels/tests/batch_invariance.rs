//! A row's matmul result must not depend on the other rows computed with it: the engine relies
//! on it so that a request's tokens are the same alone or in any batch. Checked bit for bit for
//! every weight type and SIMD level, over batch sizes that exercise the 4-row and 1-row kernels.
#![allow(clippy::unwrap_used)]

use pagoda_kernels::cpu::available_levels;
use pagoda_kernels::matmul::{MatmulScratch, matmul_at};
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

#[test]
fn each_row_is_the_same_in_any_batch() {
    let (n, k) = (8, 512);
    for ty in [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q8_0,
        GgmlType::Q4_K,
        GgmlType::Q6_K,
    ] {
        let wf = data(n * k, 3);
        let row_bytes = ty.row_bytes(k).unwrap();
        let mut w = vec![0u8; n * row_bytes];
        for r in 0..n {
            quantize_row(
                ty,
                &wf[r * k..(r + 1) * k],
                &mut w[r * row_bytes..(r + 1) * row_bytes],
            );
        }
        for level in available_levels() {
            let t = 7;
            let x = data(t * k, 11);
            let mut scratch = MatmulScratch::default();
            let mut batched = vec![0.0f32; t * n];
            matmul_at(level, &w, ty, n, k, &x, t, &mut batched, &mut scratch);
            for r in 0..t {
                let mut alone = vec![0.0f32; n];
                matmul_at(
                    level,
                    &w,
                    ty,
                    n,
                    k,
                    &x[r * k..(r + 1) * k],
                    1,
                    &mut alone,
                    &mut scratch,
                );
                for c in 0..n {
                    assert_eq!(
                        alone[c].to_bits(),
                        batched[r * n + c].to_bits(),
                        "{ty:?} {level:?}: row {r} col {c}: alone {} vs batched {}",
                        alone[c],
                        batched[r * n + c]
                    );
                }
            }
        }
    }
}
