//! `y = x . W^T` for a quantized weight matrix W, the way ggml-cpu's mul_mat does it: quantize
//! each activation row once to the weight type's vec_dot_type, then integer dot products per
//! (weight row, activation row), split across threads by chunks of weight rows.
//!
//! For several activation rows (prompt processing) each weight row is dotted against 4
//! activation rows per kernel call, so its blocks are loaded and unpacked once per 4 tokens.

use crate::cpu::{self, SimdLevel};
use crate::parallel;
use crate::quant::GgmlType;
use crate::quant::dispatch::{self, ROWS};

/// Reusable buffer for the quantized activations. It grows to the largest `t * row` seen and
/// is then reused, so steady-state calls do not allocate.
#[derive(Default)]
pub struct MatmulScratch {
    /// `t` activation rows in the weight type's vec_dot_type, back to back.
    act: Vec<u8>,
}

/// Tasks per thread: enough that a thread slowed by another process does not hold up the
/// call, few enough that claiming tasks stays cheap.
const TASKS_PER_THREAD: usize = 8;

/// Below this many weight bytes times activation rows one thread does the whole product: the
/// fork-join would cost more than it saves.
const MIN_PARALLEL_WORK: usize = 64 * 1024;

/// `y = x . W^T` with the best SIMD level of this CPU. See [`matmul_at`].
#[allow(clippy::too_many_arguments)]
pub fn matmul(
    w: &[u8],
    ty: GgmlType,
    n: usize,
    k: usize,
    x: &[f32],
    t: usize,
    y: &mut [f32],
    scratch: &mut MatmulScratch,
) {
    matmul_at(cpu::simd_level(), w, ty, n, k, x, t, y, scratch);
}

/// `y = x . W^T` with the kernels of `level`. W is `n` rows of `k` elements of type `ty` (GGUF
/// dims `[ne0 = k, ne1 = n]`), `x` is `[t][k]` and `y` is `[t][n]`, both row-major.
///
/// # Panics
/// If the slice lengths do not match the shapes, `k` is not a whole number of `ty` blocks,
/// `ty` is an activation-only type (Q8_1, Q8_K), or this CPU cannot run `level`. Shapes come
/// from tensors validated at load time, so these are caller bugs.
#[allow(clippy::too_many_arguments)]
pub fn matmul_at(
    level: SimdLevel,
    w: &[u8],
    ty: GgmlType,
    n: usize,
    k: usize,
    x: &[f32],
    t: usize,
    y: &mut [f32],
    scratch: &mut MatmulScratch,
) {
    let (kernels, vdt) = match (dispatch::dot_kernels(ty, level), ty.vec_dot_type()) {
        (Some(kernels), Some(vdt)) => (kernels, vdt),
        _ => panic!("{ty} is an activation format, not a weight type"),
    };
    let (w_row, a_row) = match (ty.row_bytes(k), vdt.row_bytes(k)) {
        (Some(w_row), Some(a_row)) => (w_row, a_row),
        _ => panic!("k = {k} is not a whole number of {ty} blocks"),
    };
    assert_eq!(w.len(), n * w_row, "{ty} weight of {n} x {k}");
    assert_eq!(x.len(), t * k, "activations of {t} x {k}");
    assert_eq!(y.len(), t * n, "output of {t} x {n}");
    if n == 0 || t == 0 {
        return;
    }

    if scratch.act.len() < t * a_row {
        scratch.act.resize(t * a_row, 0);
    }
    let act = &mut scratch.act[..t * a_row];
    let quantize = dispatch::activation_quantizer(vdt, level);
    for (xr, ar) in x.chunks_exact(k).zip(act.chunks_exact_mut(a_row)) {
        quantize(xr, ar);
    }
    let act = &*act;

    let threads = parallel::num_threads().max(1);
    let n_tasks = if threads == 1 || w.len().saturating_mul(t) < MIN_PARALLEL_WORK {
        1
    } else {
        (threads * TASKS_PER_THREAD).min(n)
    };
    let rows_per_task = n.div_ceil(n_tasks);
    let n_tasks = n.div_ceil(rows_per_task);
    let out = OutPtr(y.as_mut_ptr());

    let task = |task: usize| {
        let rows = task * rows_per_task..((task + 1) * rows_per_task).min(n);
        let mut dots = [0.0f32; ROWS];
        for row in rows {
            let wr = &w[row * w_row..(row + 1) * w_row];
            let mut ti = 0;
            while ti + ROWS <= t {
                (kernels.four)(wr, &act[ti * a_row..(ti + ROWS) * a_row], &mut dots);
                for (j, &d) in dots.iter().enumerate() {
                    // SAFETY: (ti + j, row) is in bounds (asserted shapes) and this task is
                    // the only writer of output column `row`.
                    unsafe { out.write((ti + j) * n + row, d) };
                }
                ti += ROWS;
            }
            for ti in ti..t {
                (kernels.one)(wr, &act[ti * a_row..(ti + 1) * a_row], &mut dots[..1]);
                // SAFETY: as above.
                unsafe { out.write(ti * n + row, dots[0]) };
            }
        }
    };
    if n_tasks == 1 {
        task(0);
    } else {
        parallel::run(n_tasks, &task);
    }
}

/// The output buffer shared by the tasks; each task writes only its own columns (weight rows),
/// so writes never overlap.
struct OutPtr(*mut f32);

// SAFETY: tasks write disjoint elements (see `matmul_at`), and `parallel::run` returns only after
// every task has finished, while `y`'s borrow is still held.
unsafe impl Sync for OutPtr {}

impl OutPtr {
    /// # Safety
    /// `i` is within the output and no other thread accesses element `i` concurrently.
    #[inline(always)]
    unsafe fn write(&self, i: usize, v: f32) {
        unsafe { self.0.add(i).write(v) };
    }
}
