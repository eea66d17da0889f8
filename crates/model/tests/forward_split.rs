//! A stacked projection split over its parts (`Weights::forward_split`) gives each part exactly
//! the columns of the one-buffer product, bias included, on every path: packed and written in
//! place, packed but with a part that is not whole 8-row groups, and not packed.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use pagoda_gguf::GgufFile;
use pagoda_kernels::matmul::MatmulScratch;
use pagoda_kernels::quant::{GgmlType, quantize_row};
use pagoda_model::weights::{Linear, Weights};
use pagoda_testkit::gguf_writer::GgufWriter;

const COLS: usize = 64;
/// Rows of the three layers stacked (q, k, v-like).
const ROWS: [usize; 3] = [24, 8, 16];

fn values(n: usize, seed: usize) -> Vec<f32> {
    (0..n)
        .map(|i| (((i + seed) * 7919 % 1000) as f32 / 500.0) - 1.0)
        .collect()
}

fn weights() -> (Weights, Linear) {
    let mut w = GgufWriter::new();
    let ty = GgmlType::Q4_1;
    let row_bytes = ty.row_bytes(COLS).unwrap();
    for (i, &rows) in ROWS.iter().enumerate() {
        let mut data = vec![0u8; rows * row_bytes];
        let src = values(rows * COLS, 31 * i);
        for (r, dst) in data.chunks_exact_mut(row_bytes).enumerate() {
            quantize_row(ty, &src[r * COLS..(r + 1) * COLS], dst);
        }
        let bias: Vec<u8> = values(rows, 7 + i)
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        w = w
            .tensor(
                &format!("l{i}.weight"),
                &[COLS as u64, rows as u64],
                ty,
                data,
            )
            .tensor(&format!("l{i}.bias"), &[rows as u64], GgmlType::F32, bias);
    }
    let weights = Weights::new(Arc::new(GgufFile::from_bytes(w.to_bytes()).unwrap()));
    let parts: Vec<Linear> = (0..ROWS.len())
        .map(|i| {
            weights
                .linear(&format!("l{i}"), ROWS[i], COLS, true)
                .unwrap()
        })
        .collect();
    let stacked = weights.stacked(&parts.iter().collect::<Vec<_>>()).unwrap();
    (weights, stacked)
}

/// `forward_split` into parts of `widths` against `forward` into one buffer, bit for bit.
fn check(weights: &Weights, l: &Linear, widths: &[usize], t: usize, what: &str) {
    let n: usize = ROWS.iter().sum();
    let x = values(t * COLS, 3);
    let mut whole = vec![0.0f32; t * n];
    weights.forward(l, &x, t, &mut whole, &mut MatmulScratch::default());
    let mut parts: Vec<Vec<f32>> = widths.iter().map(|w| vec![f32::NAN; t * w]).collect();
    let mut outs: Vec<&mut [f32]> = parts.iter_mut().map(|p| &mut p[..]).collect();
    let (mut scratch, mut tmp) = (MatmulScratch::default(), Vec::new());
    weights.forward_split(l, &x, t, &mut outs, &mut scratch, &mut tmp);
    let mut start = 0;
    for (part, &w) in parts.iter().zip(widths) {
        for r in 0..t {
            for c in 0..w {
                assert_eq!(
                    part[r * w + c].to_bits(),
                    whole[r * n + start + c].to_bits(),
                    "{what}, widths {widths:?}, t {t}: row {r} column {}",
                    start + c
                );
            }
        }
        start += w;
    }
}

#[test]
fn split_parts_hold_the_stacked_columns_with_their_bias() {
    let (weights, stacked) = weights();
    let packed = weights.packed(stacked.clone());
    for t in [1, 3, 17] {
        // Whole 8-row groups: written in place when the CPU has the packed kernels.
        check(&weights, &packed, &[24, 8, 16], t, "packed");
        // A first part of 20 rows would split a group: the stacked buffer and copies.
        check(&weights, &packed, &[20, 12, 16], t, "packed, ragged parts");
        check(&weights, &stacked, &[24, 8, 16], t, "plain layout");
    }
}

#[test]
fn an_empty_batch_writes_nothing() {
    // Each part's width is its length over `t`, so with no rows there is none to derive: the
    // call must return before touching the outputs or growing the scratch, on either layout.
    const UNTOUCHED: f32 = -7.25;
    let (weights, stacked) = weights();
    let packed = weights.packed(stacked.clone());
    for (l, what) in [(&packed, "packed"), (&stacked, "plain layout")] {
        let (mut a, mut b) = (vec![UNTOUCHED; 24], vec![UNTOUCHED; 8]);
        let mut tmp = Vec::new();
        weights.forward_split(
            l,
            &[],
            0,
            &mut [&mut a[..], &mut b[..]],
            &mut MatmulScratch::default(),
            &mut tmp,
        );
        assert!(
            a.iter()
                .chain(&b)
                .all(|v| v.to_bits() == UNTOUCHED.to_bits()),
            "{what}: an empty batch wrote into the outputs"
        );
        assert!(tmp.is_empty(), "{what}: an empty batch grew the scratch");
    }
}
