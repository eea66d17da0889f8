//! Low-rank adapter (LoRA) products added into a linear layer's output rows:
//! `y[i] += scale * B (A x[i])` for every row `i` of an adapter's group. A is stored
//! `[rank][in]` and B transposed, `[rank][out]`, so both products read contiguous rows.
//!
//! The work is split by adapter, not by row range (Punica's SGMV on a CPU): each task runs a
//! piece of one adapter's rows, four rows at a time, so each piece of A and B loaded serves four
//! rows, and an adapter's weights are read by its few tasks (about two per thread over all
//! adapters), not once per row, however the batch interleaves adapters. A row's arithmetic is the same whichever rows share its tile or task, so its result
//! never depends on what else is in the batch.

mod groups;

#[cfg(target_arch = "x86_64")]
mod avx2;

pub use groups::LoraGroups;

use crate::cpu::{SimdLevel, simd_level};
use crate::ops::use_avx2;
use crate::parallel::{self, SharedMut};

/// The largest rank the kernels take (the intermediate `A x` lives on the stack).
pub const MAX_RANK: usize = 512;

/// Rows that share each load of A and B.
pub const TILE_ROWS: usize = 4;

/// One adapter's update of one projection.
#[derive(Clone, Copy, Debug)]
pub struct LoraMats<'a> {
    /// `[rank][in]`.
    pub a: &'a [f32],
    /// B transposed, `[rank][out]`.
    pub bt: &'a [f32],
    pub rank: usize,
    pub scale: f32,
}

impl LoraMats<'_> {
    /// `(in, out)`.
    ///
    /// # Panics
    /// If `rank` is 0 or above [`MAX_RANK`], or A and B are not `rank` rows.
    fn dims(&self) -> (usize, usize) {
        let rank = self.rank;
        assert!((1..=MAX_RANK).contains(&rank), "lora: rank {rank}");
        let (d_in, d_out) = (self.a.len() / rank, self.bt.len() / rank);
        assert!(
            self.a.len() == rank * d_in && self.bt.len() == rank * d_out && d_in > 0 && d_out > 0,
            "lora: A has {} values and B {} for rank {rank}",
            self.a.len(),
            self.bt.len()
        );
        (d_in, d_out)
    }
}

/// `y[i] += mats(g).scale * B (A x[i])` for every row `i` of every group `g` of `groups` whose
/// `mats(g)` is `Some` (the adapters that change this projection). `x` is `[rows][in]` and `y`
/// `[rows][out]` for the `groups.rows()` rows the groups were planned for.
///
/// # Panics
/// If a group's matrices or the buffers disagree with the shapes.
pub fn lora_add<'m>(
    x: &[f32],
    y: &mut [f32],
    groups: &LoraGroups,
    mats: &(dyn Fn(usize) -> Option<LoraMats<'m>> + Sync),
) {
    lora_add_with(simd_level(), x, y, groups, mats);
}

/// [`lora_add`] on an explicit SIMD level.
pub fn lora_add_with<'m>(
    level: SimdLevel,
    x: &[f32],
    y: &mut [f32],
    groups: &LoraGroups,
    mats: &(dyn Fn(usize) -> Option<LoraMats<'m>> + Sync),
) {
    let n = groups.rows();
    if n == 0 || groups.is_empty() {
        return;
    }
    assert!(
        x.len().is_multiple_of(n) && y.len().is_multiple_of(n),
        "lora: {} inputs and {} outputs are not {n} rows",
        x.len(),
        y.len()
    );
    let (d_in, d_out) = (x.len() / n, y.len() / n);
    let active = || (0..groups.len()).filter_map(|g| mats(g).map(|m| (g, m)));
    let mut total = 0;
    for (g, m) in active() {
        assert_eq!(
            m.dims(),
            (d_in, d_out),
            "lora: group {g}'s matrices are not {d_in} -> {d_out}"
        );
        total += groups.group(g).len();
    }
    if total == 0 {
        return;
    }
    // Pieces of a multiple of TILE_ROWS rows, about two per thread over all groups: few enough
    // that each adapter's weights are read by few tasks, enough to balance the threads.
    let threads = parallel::num_threads();
    let per_task = total
        .div_ceil(2 * threads)
        .next_multiple_of(TILE_ROWS)
        .max(TILE_ROWS);
    let pieces = |g: usize| groups.group(g).len().div_ceil(per_task);
    let tasks: usize = active().map(|(g, _)| pieces(g)).sum();
    let y = SharedMut::new(y);
    parallel::run(tasks, &|task| {
        // Which group and piece this task is: a scan over the few groups.
        let mut left = task;
        for (g, m) in active() {
            let k = pieces(g);
            if left < k {
                let rows = groups.group(g);
                let piece = &rows[left * per_task..((left + 1) * per_task).min(rows.len())];
                add_rows(level, x, &y, piece, m, d_in, d_out);
                return;
            }
            left -= k;
        }
    });
}

/// One adapter over some of its rows, `TILE_ROWS` at a time.
fn add_rows(
    level: SimdLevel,
    x: &[f32],
    y: &SharedMut<'_, f32>,
    rows: &[u32],
    m: LoraMats<'_>,
    d_in: usize,
    d_out: usize,
) {
    let x_row = |i: u32| &x[i as usize * d_in..][..d_in];
    // SAFETY: a group's rows are distinct and no row is in two groups (`LoraGroups` is built
    // that way), and each row of a group is in exactly one task's piece, so no two live slices
    // overlap.
    let y_row = |i: u32| unsafe { y.slice_mut(i as usize * d_out, d_out) };
    #[cfg(target_arch = "x86_64")]
    if use_avx2(level) {
        let mut u = [[0f32; MAX_RANK]; TILE_ROWS];
        let mut tiles = rows.chunks_exact(TILE_ROWS);
        for t in &mut tiles {
            let xs = [0, 1, 2, 3].map(|k| x_row(t[k]));
            let ys = [0, 1, 2, 3].map(|k| y_row(t[k]));
            // SAFETY: AVX2 and FMA checked; every row has the lengths checked by the caller.
            unsafe { avx2::tile(xs, ys, m, &mut u) };
        }
        for &i in tiles.remainder() {
            // SAFETY: as above.
            unsafe { avx2::tile([x_row(i)], [y_row(i)], m, std::array::from_mut(&mut u[0])) };
        }
        return;
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = level;
    for &i in rows {
        scalar_row(x_row(i), y_row(i), m);
    }
}

/// The portable kernel, one row at a time. Its summation order is not the SIMD kernel's, but the
/// level is fixed per machine, so rows still never depend on each other.
fn scalar_row(x: &[f32], y: &mut [f32], m: LoraMats<'_>) {
    let (d_in, d_out) = (x.len(), y.len());
    let mut u = [0f32; MAX_RANK];
    let u = &mut u[..m.rank];
    for (uj, aj) in u.iter_mut().zip(m.a.chunks_exact(d_in)) {
        *uj = m.scale * aj.iter().zip(x).map(|(p, q)| p * q).sum::<f32>();
    }
    for (&uj, bj) in u.iter().zip(m.bt.chunks_exact(d_out)) {
        for (v, &b) in y.iter_mut().zip(bj) {
            *v += uj * b;
        }
    }
}

#[cfg(test)]
mod tests;
