//! `y = x . W^T` in f32 for float weight matrices (the encoders' exact mode): W packed once at
//! load into 16-column panels ([`F32Panels`]), the product run as register tiles of 6 rows x 16
//! columns (`tile.rs`), blocked the way BLIS/GotoBLAS block it: k in slices of [`KC`] so a
//! panel's slice (16 KB) stays in L1 while every row tile of a task's rows walks over it, rows
//! in blocks of [`MC`] so their slice of x (96 KB) stays in L2. Tasks are (row block, run of
//! panels) pairs on the kernels' pool.
//!
//! An output's value is the sum of its k terms in order, one FMA each, restarted from the
//! stored partial at every `KC` boundary: the same for every row count, tile and thread split,
//! so a row's result does not depend on the batch it runs in.

mod panels;
pub(crate) mod tile;

pub use panels::{F32Panels, NR};

use crate::cpu::{self, SimdLevel};
use crate::parallel;
use tile::{MR, TileFn};

/// Values of k per slice: a panel's slice is `KC * NR * 4` = 16 KB, half of L1.
pub const KC: usize = 256;
/// Rows of x per block: `MC * KC * 4` = 96 KB, L2-resident while the panels walk over it.
const MC: usize = 16 * MR;
/// Tasks per thread, so a thread slowed by another process does not hold the call up.
const TASKS_PER_THREAD: usize = 4;
/// Below this many multiply-adds one thread does the product: a fork-join costs a few µs.
const MIN_PARALLEL_MACS: usize = 256 * 1024;

/// [`gemm_f32_at`] with this CPU's best level.
pub fn gemm_f32(p: &F32Panels, x: &[f32], m: usize, y: &mut [f32]) {
    gemm_f32_at(cpu::simd_level(), p, x, m, y);
}

/// `y[m][n] = x[m][k] . W^T` (both row-major) with the tiles of `level`.
///
/// # Panics
/// If the slices do not hold `m` rows of `k` and `n` values, or the CPU cannot run `level`
/// (caller bugs: shapes come from tensors checked at load).
pub fn gemm_f32_at(level: SimdLevel, p: &F32Panels, x: &[f32], m: usize, y: &mut [f32]) {
    let (n, k) = (p.rows(), p.cols());
    assert_eq!(x.len(), m * k, "activations of {m} x {k}");
    assert_eq!(y.len(), m * n, "output of {m} x {n}");
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        y.fill(0.0);
        return;
    }
    let tiles: &[TileFn; MR] = match level {
        #[cfg(target_arch = "x86_64")]
        SimdLevel::Avx2 => {
            assert!(
                crate::quant::dispatch::level_supported(level),
                "this CPU cannot run {level:?}"
            );
            &tile::AVX2
        }
        _ => &tile::SCALAR,
    };
    let panels = n.div_ceil(NR);
    let blocks = m.div_ceil(MC);
    let threads = parallel::num_threads().max(1);
    let want = if threads == 1 || m * n * k < MIN_PARALLEL_MACS {
        1
    } else {
        threads * TASKS_PER_THREAD
    };
    // Split the panels only as far as the row blocks leave tasks short.
    let per_task = panels.div_ceil(want.div_ceil(blocks)).max(1);
    let chunks = panels.div_ceil(per_task);
    let out = OutPtr(y.as_mut_ptr());

    let task = |t: usize| {
        let (rb, chunk) = (t / chunks, t % chunks);
        let rows = rb * MC..((rb + 1) * MC).min(m);
        let ps = chunk * per_task..((chunk + 1) * per_task).min(panels);
        let mut edge = [0f32; MR * NR];
        for k0 in (0..k).step_by(KC) {
            let kc = KC.min(k - k0);
            let load = k0 > 0;
            for pi in ps.clone() {
                let j = pi * NR;
                let cols = NR.min(n - j);
                // SAFETY: pi < panels and k0 < k.
                let b = unsafe { p.panel(pi, k0) };
                let mut i = rows.start;
                while i < rows.end {
                    let mr = MR.min(rows.end - i);
                    let a = x[i * k + k0..].as_ptr();
                    // SAFETY: `tiles` run on this CPU (checked above); rows i..i + mr < m of x
                    // hold k values from k0, kc of them read; the panel slice holds kc x NR
                    // values (32-byte aligned: 64-byte base, KC * NR * 4 bytes per slice); a
                    // full panel's outputs (i.., j..j + 16) are inside y at stride n and only
                    // this task writes them; a partial one goes through `edge` (MR x NR).
                    unsafe {
                        if cols == NR {
                            (tiles[mr - 1])(a, k, b, kc, out.at(i * n + j), n, load);
                        } else {
                            for r in 0..mr {
                                for c in 0..cols {
                                    edge[r * NR + c] = *out.at((i + r) * n + j + c);
                                }
                            }
                            (tiles[mr - 1])(a, k, b, kc, edge.as_mut_ptr(), NR, load);
                            for r in 0..mr {
                                for c in 0..cols {
                                    *out.at((i + r) * n + j + c) = edge[r * NR + c];
                                }
                            }
                        }
                    }
                    i += mr;
                }
            }
        }
    };
    let n_tasks = blocks * chunks;
    if n_tasks == 1 {
        task(0);
    } else {
        parallel::run(n_tasks, &task);
    }
}

/// The output shared by the tasks, each writing its own rectangle (here: a row block's panels;
/// in `attention/bidirectional.rs`: a query block's head).
#[derive(Clone, Copy)]
pub(crate) struct OutPtr(pub(crate) *mut f32);

// SAFETY: tasks write disjoint rectangles, and `parallel::run` returns only after every task
// has finished, while `y`'s borrow is still held.
unsafe impl Sync for OutPtr {}

impl OutPtr {
    /// # Safety
    /// `i` is within the output.
    #[inline(always)]
    pub(crate) unsafe fn at(&self, i: usize) -> *mut f32 {
        unsafe { self.0.add(i) }
    }
}
