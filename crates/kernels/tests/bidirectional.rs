//! The encoders' bidirectional attention (`attention::bidirectional_attention_at`) against an
//! f64 reference on random packed batches: ragged lengths (1 token, not whole 16-key panels,
//! more than one query block), head dims 32, 64, 256 and one not a multiple of 16, grouped
//! heads, a sliding window; and each sequence's output equal bit for bit to the same sequence
//! run alone (batch invariance).

#![allow(clippy::unwrap_used)] // tests may unwrap

use pagoda_kernels::attention::{Heads, bidirectional_attention_at};
use pagoda_kernels::cpu::{self, SimdLevel};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

struct Case {
    lens: &'static [usize],
    heads: Heads,
    window: Option<u32>,
}

const fn heads(n_heads: usize, n_kv_heads: usize, head_dim: usize) -> Heads {
    Heads {
        n_heads,
        n_kv_heads,
        head_dim,
    }
}

const CASES: [Case; 6] = [
    Case {
        lens: &[1, 17, 5, 64, 33],
        heads: heads(4, 4, 32),
        window: None,
    },
    Case {
        lens: &[100, 3],
        heads: heads(2, 2, 64),
        window: None,
    },
    Case {
        lens: &[49, 16, 7],
        heads: heads(3, 1, 256),
        window: None,
    },
    Case {
        lens: &[130, 9, 61],
        heads: heads(4, 2, 64),
        window: Some(20),
    },
    Case {
        lens: &[23, 40],
        heads: heads(2, 1, 40),
        window: Some(3),
    },
    Case {
        lens: &[12],
        heads: heads(2, 2, 24),
        window: Some(1),
    },
];

struct Batch {
    starts: Vec<usize>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
}

fn batch(rng: &mut StdRng, lens: &[usize], h: Heads) -> Batch {
    let mut starts = vec![0];
    for &n in lens {
        starts.push(starts.last().unwrap() + n);
    }
    let t = *starts.last().unwrap();
    let mut fill =
        |n: usize, r: f32| -> Vec<f32> { (0..n).map(|_| rng.random_range(-r..r)).collect() };
    Batch {
        q: fill(t * h.n_heads * h.head_dim, 2.0),
        k: fill(t * h.n_kv_heads * h.head_dim, 2.0),
        v: fill(t * h.n_kv_heads * h.head_dim, 1.0),
        starts,
    }
}

fn run(level: SimdLevel, b: &Batch, h: Heads, scale: f32, window: Option<u32>) -> Vec<f32> {
    let mut out = vec![f32::NAN; b.q.len()];
    bidirectional_attention_at(
        level, &b.starts, h, scale, window, &b.q, &b.k, &b.v, &mut out,
    );
    out
}

/// Softmax attention in f64, one (row, head) at a time.
fn reference(b: &Batch, h: Heads, scale: f32, window: Option<u32>) -> Vec<f64> {
    let hd = h.head_dim;
    let (qs, kvs) = (h.n_heads * hd, h.n_kv_heads * hd);
    let mut out = vec![0f64; b.q.len()];
    for w in b.starts.windows(2) {
        let (s, e) = (w[0], w[1]);
        for i in s..e {
            for head in 0..h.n_heads {
                let g = head / (h.n_heads / h.n_kv_heads);
                let seen = |j: usize| window.is_none_or(|w| i.abs_diff(j) < w as usize);
                let logits: Vec<f64> = (s..e)
                    .map(|j| {
                        let dot: f64 = (0..hd)
                            .map(|d| {
                                b.q[i * qs + head * hd + d] as f64
                                    * b.k[j * kvs + g * hd + d] as f64
                            })
                            .sum();
                        if seen(j) {
                            dot * scale as f64
                        } else {
                            f64::NEG_INFINITY
                        }
                    })
                    .collect();
                let max = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let p: Vec<f64> = logits.iter().map(|l| (l - max).exp()).collect();
                let sum: f64 = p.iter().sum();
                for d in 0..hd {
                    out[i * qs + head * hd + d] = (s..e)
                        .map(|j| p[j - s] * b.v[j * kvs + g * hd + d] as f64)
                        .sum::<f64>()
                        / sum;
                }
            }
        }
    }
    out
}

#[test]
fn matches_an_f64_reference_on_every_level() {
    let mut rng = StdRng::seed_from_u64(36);
    for c in &CASES {
        let b = batch(&mut rng, c.lens, c.heads);
        let scale = 1.0 / (c.heads.head_dim as f32).sqrt();
        let want = reference(&b, c.heads, scale, c.window);
        for level in cpu::available_levels() {
            let got = run(level, &b, c.heads, scale, c.window);
            for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
                // Values are below 1 in magnitude: f32 rounding of a few hundred terms.
                assert!(
                    (g as f64 - w).abs() <= 2e-5,
                    "{:?} {:?} {level:?} at {i}: {g} vs {w}",
                    c.lens,
                    c.heads
                );
            }
        }
    }
}

#[test]
fn a_sequence_gets_the_same_bits_alone_as_in_any_batch() {
    let mut rng = StdRng::seed_from_u64(7);
    for c in &CASES {
        let b = batch(&mut rng, c.lens, c.heads);
        let scale = 0.125;
        for level in cpu::available_levels() {
            let all = run(level, &b, c.heads, scale, c.window);
            let row = c.heads.n_heads * c.heads.head_dim;
            let kv = c.heads.n_kv_heads * c.heads.head_dim;
            for w in b.starts.windows(2) {
                let (s, e) = (w[0], w[1]);
                let alone = Batch {
                    starts: vec![0, e - s],
                    q: b.q[s * row..e * row].to_vec(),
                    k: b.k[s * kv..e * kv].to_vec(),
                    v: b.v[s * kv..e * kv].to_vec(),
                };
                let got = run(level, &alone, c.heads, scale, c.window);
                let same = got
                    .iter()
                    .zip(&all[s * row..e * row])
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(
                    same,
                    "{:?} {level:?}: sequence at {s} differs alone",
                    c.lens
                );
            }
        }
    }
}
