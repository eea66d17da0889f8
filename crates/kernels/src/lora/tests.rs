use super::*;
use crate::cpu::available_levels;

fn values(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| {
            ((i as u32).wrapping_mul(2654435761).wrapping_add(seed) >> 8) as f32 / 16_777_216.0
                - 0.5
        })
        .collect()
}

fn groups(owner: &[Option<u32>], adapters: usize) -> LoraGroups {
    let mut g = LoraGroups::default();
    g.plan(owner.iter().copied(), adapters);
    g
}

#[test]
fn groups_hold_each_row_once_in_order() {
    let g = groups(&[Some(1), None, Some(0), Some(1), Some(7), Some(1)], 2);
    assert_eq!((g.rows(), g.len()), (6, 2));
    assert_eq!(g.group(0), &[2]);
    assert_eq!(g.group(1), &[0, 3, 5]);
    // Re-planned with fewer rows: nothing of the last plan stays.
    let mut g = g;
    g.plan([None, None].into_iter(), 2);
    assert!(g.is_empty());
    assert_eq!(g.group(1), &[] as &[u32]);
}

#[test]
fn every_level_matches_the_dense_product() {
    for &(rank, d_in, d_out, n) in &[
        (1, 8, 8, 1),
        (4, 37, 19, 3),
        (6, 50, 70, 2),
        (16, 256, 96, 5),
        (16, 576, 576, 9),
        (64, 576, 192, 2),
        (7, 33, 41, 13),
    ] {
        let (x, a, bt) = (
            values(n * d_in, 1),
            values(rank * d_in, 2),
            values(rank * d_out, 3),
        );
        let y0 = values(n * d_out, 4);
        let m = LoraMats {
            a: &a,
            bt: &bt,
            rank,
            scale: 0.5,
        };
        // Every row but the second uses the adapter.
        let owner: Vec<_> = (0..n).map(|i| (i != 1 || n == 1).then_some(0)).collect();
        // Reference in f64: y + 0.5 * B (A x).
        let mut want = y0.clone();
        for i in (0..n).filter(|&i| owner[i].is_some()) {
            for o in 0..d_out {
                let mut s = 0f64;
                for j in 0..rank {
                    let ax: f64 = (0..d_in)
                        .map(|k| a[j * d_in + k] as f64 * x[i * d_in + k] as f64)
                        .sum();
                    s += ax * bt[j * d_out + o] as f64;
                }
                want[i * d_out + o] += (0.5 * s) as f32;
            }
        }
        for level in available_levels() {
            let mut y = y0.clone();
            lora_add_with(level, &x, &mut y, &groups(&owner, 1), &|_| Some(m));
            for (g, w) in y.iter().zip(&want) {
                assert!(
                    (g - w).abs() < 1e-4 * (1.0 + w.abs()),
                    "{level:?} rank {rank}: {g} vs {w}"
                );
            }
        }
    }
}

/// A row gives the same bits alone, in a tile of four, next to other adapters' rows and split
/// over the threads: what batch invariance needs of the kernel. The widths leave a scalar tail
/// on both products, and ranks 8, 3 and 16 take every rank-blocking path.
#[test]
fn rows_are_independent() {
    let (d_in, d_out) = (75, 43);
    let rows = 23;
    let x = values(rows * d_in, 5);
    let mats: Vec<(Vec<f32>, Vec<f32>, usize)> = [8, 3, 16]
        .iter()
        .enumerate()
        .map(|(s, &r)| {
            let s = s as u32;
            (values(r * d_in, 6 + s), values(r * d_out, 9 + s), r)
        })
        .collect();
    let get = |g: usize| {
        mats.get(g).map(|(a, bt, rank)| LoraMats {
            a,
            bt,
            rank: *rank,
            scale: 2.0,
        })
    };
    for level in available_levels() {
        // Row 8 with adapter 0 alone.
        let mut alone = vec![0f32; d_out];
        lora_add_with(
            level,
            &x[8 * d_in..9 * d_in],
            &mut alone,
            &groups(&[Some(0)], 1),
            &get,
        );
        // Then among 22 rows of three adapters and the base model, and among 22 of adapter 0.
        for owner in [
            (0..rows)
                .map(|i| [Some(0), Some(1), None, Some(2)][i % 4])
                .collect::<Vec<_>>(),
            vec![Some(0); rows],
        ] {
            let mut all = vec![0f32; rows * d_out];
            lora_add_with(level, &x, &mut all, &groups(&owner, 3), &get);
            assert_eq!(alone, all[8 * d_out..9 * d_out], "{level:?}");
        }
    }
}

#[test]
fn a_group_without_matrices_is_left_alone() {
    let (d_in, d_out, rank) = (16, 8, 2);
    let (x, a, bt) = (
        values(3 * d_in, 1),
        values(rank * d_in, 2),
        values(rank * d_out, 3),
    );
    let mut y = vec![1f32; 3 * d_out];
    let m = LoraMats {
        a: &a,
        bt: &bt,
        rank,
        scale: 1.0,
    };
    let g = groups(&[Some(0), Some(1), Some(0)], 2);
    lora_add(&x, &mut y, &g, &|g| (g == 0).then_some(m));
    assert!(y[d_out..2 * d_out].iter().all(|&v| v == 1.0));
    assert!(y[..d_out].iter().any(|&v| v != 1.0));
}
