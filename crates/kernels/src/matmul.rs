//! `y = x . W^T` for a quantized weight matrix W, the way ggml-cpu's mul_mat does it: quantize
//! each activation row once to the weight type's vec_dot_type, then integer dot products per
//! (weight row, activation row), split across threads by chunks of weight rows.
//!
//! The model's matrices take [`matmul_packed`]: weights repacked at load into 8-row groups
//! (`quant/packed/`), one kernel for decode and prompt alike. The plain-layout [`matmul`] below
//! serves the other types and CPUs without AVX2.
//!
//! On AVX2, with several activation rows, the 32-element block formats (Q4_0, Q4_1, Q5_0, Q8_0) go through register tiles
//! (`quant/tile.rs`): several activation rows x several weight rows per call, walked over a panel
//! of activation rows small enough to stay in L1 with the task's weight rows. The other types dot
//! each weight row against 4 activation rows per kernel call. Every path accumulates a given
//! (row, column) in the same order, so results do not depend on the batch or the tiling.

use crate::cpu::{self, SimdLevel};
use crate::parallel;
use crate::quant::GgmlType;
use crate::quant::dispatch::{self, ROWS};
use crate::quant::packed::{
    GROUP_ROWS, GemmFn, MAX_MR as PACKED_MR, PackedMatrix, STREAMS, offset_quants,
};
use crate::quant::tile::{self, ActScales, MAX_MR, MAX_NR, TileTable};
use std::cell::RefCell;
use std::ops::Range;

/// Reusable buffer for the quantized activations. It grows to the largest `t * row` seen and
/// is then reused, so steady-state calls do not allocate.
#[derive(Default)]
pub struct MatmulScratch {
    /// `t` activation rows in the weight type's vec_dot_type, back to back.
    act: Vec<u8>,
    /// Tiled path: each activation block's `d` then (Q8_1) `s` as f32, block-major
    /// (`[block][row]`), so a tile reads consecutive rows' scales together.
    scales: Vec<f32>,
}

/// Tile shape for prompt processing / batched decode: activation rows x weight rows.
const GEMM_MR: usize = 4;
const GEMM_NR: usize = 2;
/// Activation rows walked per pass over a task's weight rows (rounded down to a whole number of
/// kernel calls): ~20-40 KB of 576-wide activations, L1- or L2-resident next to a tile's weight
/// rows. Panels of 18, 24 and 48 rows measured the same for Q4_1 (matmul bench, t = 128/512).
const ACT_PANEL: usize = 32;

/// From this many activation rows on, types with an unpacked form ([`PackedMatrix`]'s
/// `Unpacked`) unpack each group once per call: unpacking costs about one kernel call's work
/// per group, and saves the bit manipulation of every later call on it.
const UNPACK_MIN_ROWS: usize = 8;

/// Products of at most this many activation rows (a speculative verify step, a small decode
/// batch) take a type's wide kernels ([`PackedKernels`]'s `few_rows_mr`) where it has them: two
/// or three calls per group at most, each weight block unpacked for up to 7 or 8 rows at once.
const FEW_ROWS: usize = 16;

thread_local! {
    /// One group's unpacked blocks (a few KB), reused across calls.
    static UNPACKED: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Tasks per thread: enough that a thread slowed by another process does not hold up the
/// call, few enough that claiming tasks stays cheap.
const TASKS_PER_THREAD: usize = 8;

/// Tasks per thread of a packed product of a decode batch (2..=[`ACT_PANEL`] rows), which is
/// compute-bound: a task of 1/16 of a 16-row product of Qwen 1.5B's gate/up is ~0.3 ms, and
/// the thread that finishes first waits for the other's last task, about half a task per
/// product on average. Smaller tasks shorten that wait (8 -> 32 tasks, 16 sequences: ~4% less
/// CPU and wall time a step, loaded). But each task's first group is not fetched ahead (see
/// `packed::prefetch_next_group`), and with that prefetch in place 16 measured better than 32
/// (Qwen 1.5B forward, idle, 6 of 7 interleaved rounds: 5 rows -5 to -10%, 16 rows -3 to -5%).
/// One row keeps [`TASKS_PER_THREAD`], whose longer runs of groups stream the weights; so do
/// prompts, where each task walks every activation panel over its groups and smaller tasks
/// would read the panels more often.
const TASKS_PER_THREAD_ROWS: usize = 16;

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
    // One activation row (decode) stays on the row kernels: the 1 x 4 tile measured about half
    // their speed end to end (register pressure), while tiles win for t > 1. Both accumulate in
    // the same order, so a row's result does not depend on which path ran it.
    let tiles = match level {
        SimdLevel::Avx2 if t > 1 => tile::tiles(ty),
        _ => None,
    };
    if let Some(tiles) = tiles {
        let scales = &mut scratch.scales;
        fill_scales(act, a_row, vdt, k, t, scales);
        tiled(tiles, w, w_row, n, k, act, a_row, t, scales, y);
        return;
    }

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

/// `y = x . W^T` for a matrix packed at load ([`PackedMatrix`]): `x` is `[t][k]`, `y` is
/// `[t][n]`. Tasks take runs of 8-row groups; each walks its groups over panels of activation
/// rows, so a group's blocks stay in L1 while every row of the panel uses them. With many rows,
/// a type with an unpacked form (Q5_0, Q6_K) first unpacks the task's groups once and walks the
/// panels over those.
///
/// # Panics
/// If the slice lengths do not match the matrix's shape (a caller bug).
pub fn matmul_packed(
    p: &PackedMatrix,
    x: &[f32],
    t: usize,
    y: &mut [f32],
    scratch: &mut MatmulScratch,
) {
    matmul_packed_into(p, x, t, &mut [y], scratch);
}

/// Most output parts [`matmul_packed_into`] takes (q, k and v of a stacked projection).
pub const MAX_OUT_PARTS: usize = 3;

/// [`matmul_packed`] with the output columns split over `outs`: consecutive column ranges,
/// part `i` a row-major `[t][w_i]` buffer, `sum w_i = rows`. A stacked q/k/v or gate/up product
/// writes straight into its parts instead of into one `[t][rows]` buffer that is then copied
/// apart (at a 2,048-token prompt step those copies were ~2.5% of the step). Every part but the
/// last must be a whole number of 8-row groups, so no group straddles two parts.
///
/// # Panics
/// If there are more than [`MAX_OUT_PARTS`] parts, a part but the last is not a multiple of 8
/// wide, or the shapes do not match (caller bugs).
pub fn matmul_packed_into(
    p: &PackedMatrix,
    x: &[f32],
    t: usize,
    outs: &mut [&mut [f32]],
    scratch: &mut MatmulScratch,
) {
    let (n, k, ty) = (p.rows(), p.cols(), p.ty());
    let kern = p.kernels();
    let a_row = p.activation_row_bytes();
    assert_eq!(x.len(), t * k, "activations of {t} x {k}");
    if n == 0 || t == 0 {
        return;
    }
    let out = Outputs::new(outs, t, n);
    if scratch.act.len() < t * a_row {
        scratch.act.resize(t * a_row, 0);
    }
    let act = &mut scratch.act[..t * a_row];
    // Several rows of a type with VNNI kernels take them (one row stays on the streaming GEMV);
    // their activations are offset to unsigned as they are quantized.
    let vnni = kern.vnni.filter(|_| t > 1 && cpu::avx_vnni());
    parallel::for_rows(t, [&mut *act], &|rows, [part]| {
        let xs = x[rows.start * k..rows.end * k].chunks_exact(k);
        for (xr, ar) in xs.zip(part.chunks_exact_mut(a_row)) {
            p.quantize_activations(xr, ar);
            if vnni.is_some() {
                offset_quants(ar);
            }
        }
    });
    let act = &*act;
    let nb = k / ty.block_size();
    let groups = n.div_ceil(GROUP_ROWS);

    let threads = parallel::num_threads().max(1);
    let n_tasks = if threads == 1 || p.len_bytes().saturating_mul(t) < MIN_PARALLEL_WORK {
        1
    } else {
        let per_thread = if t > 1 && t <= ACT_PANEL {
            TASKS_PER_THREAD_ROWS
        } else {
            TASKS_PER_THREAD
        };
        (threads * per_thread).min(groups)
    };
    let per_task = groups.div_ceil(n_tasks);
    let n_tasks = groups.div_ceil(per_task);

    // Prompt-sized products of types with an unpacked form (see `packed::Unpacked`) walk the
    // panels over unpacked groups; the others over the packed groups.
    let few_rows_mr = kern.few_rows_mr.filter(|_| t <= FEW_ROWS);
    let unpacked = kern
        .unpacked
        .as_ref()
        .filter(|_| few_rows_mr.is_none() && t >= UNPACK_MIN_ROWS);
    // Rows `rows` of group `g` with kernels `gemm` over group blocks at `w`.
    let run_rows = |gemm: &[GemmFn], max_mr: usize, w: *const u8, g: usize, rows: Range<usize>| {
        let mut edge = [0.0f32; GROUP_ROWS * PACKED_MR];
        let j = g * GROUP_ROWS;
        let full = j + GROUP_ROWS <= n;
        let mut i = rows.start;
        while i < rows.end {
            // Rows split as evenly as the fewest calls allow (5 rows as 3 + 2, 4 as
            // 2 + 2): a call's shared work is paid once whatever its row count, and a
            // one-row call does it for a single row.
            let left = rows.end - i;
            let mr = left.div_ceil(left.div_ceil(max_mr));
            let a = act[i * a_row..].as_ptr();
            // SAFETY: `p` was packed at the Avx2 level, so the CPU runs these kernels (the
            // VNNI ones only when `cpu::avx_vnni` said so, their activations offset); `w`
            // holds group g's `nb` blocks in the form `gemm` reads; rows i..i + mr < t of `act`
            // are quantized with `nb` blocks each; a full group's outputs (i.., j..j + 8) lie
            // inside one output part (`Outputs`), at that part's row stride, and only this task
            // writes columns of group `g`; a partial group writes to `edge` (8 x MAX_MR)
            // instead.
            unsafe {
                if full {
                    let (y, ldy) = out.at(i, j);
                    (gemm[mr - 1])(w, nb, a, a_row, y, ldy);
                } else {
                    (gemm[mr - 1])(w, nb, a, a_row, edge.as_mut_ptr(), GROUP_ROWS);
                    for r in 0..mr {
                        for c in 0..n - j {
                            out.write(i + r, j + c, edge[r * GROUP_ROWS + c]);
                        }
                    }
                }
            }
            i += mr;
        }
    };
    let task = |task: usize| {
        let g_range = task * per_task..((task + 1) * per_task).min(groups);
        if let (1, Some(gemv)) = (t, kern.gemv) {
            // One row: the task's full groups as `STREAMS` runs read side by side, a block of
            // each in turn (see `packed::GemvFn`); what is left one group at a time.
            let full = g_range.start..g_range.end.min(n / GROUP_ROWS);
            let q = full.len() / STREAMS;
            for i in 0..q {
                let gs: [usize; STREAMS] = std::array::from_fn(|s| full.start + s * q + i);
                // SAFETY: AVX2 as below; every group `gs[s]` is full (all 8 rows inside `y`)
                // with `nb` group blocks; the one activation row has `nb` blocks; only this
                // task writes those groups' columns.
                unsafe {
                    gemv(
                        gs.map(|g| p.group(g).as_ptr()),
                        nb,
                        act.as_ptr(),
                        gs.map(|g| out.at(0, g * GROUP_ROWS).0),
                    )
                };
            }
            for g in full.start + STREAMS * q..g_range.end {
                run_rows(kern.gemm, 1, p.group(g).as_ptr(), g, 0..1);
            }
            return;
        }
        if let Some(u) = unpacked {
            UNPACKED.with(|buf| {
                let mut buf = buf.borrow_mut();
                let group_len = nb * u.block_bytes;
                // With one panel of rows each group is done once unpacked, so one group at a
                // time (L1 or L2) is enough: unpacking all of a task's groups first wrote and
                // read back 15 MB per task for 8 rows over Qwen 1.5B's LM head. With more rows,
                // all of them (tens of KB for a layer) are unpacked once and walked in panels
                // of rows as the packed path does, so each panel stays in L1.
                let chunk = if t <= ACT_PANEL {
                    1
                } else {
                    g_range.len().max(1)
                };
                buf.resize(chunk * group_len, 0);
                let panel = ACT_PANEL - ACT_PANEL % u.max_mr;
                for g0 in g_range.clone().step_by(chunk) {
                    let gs = g0..(g0 + chunk).min(g_range.end);
                    for (i, g) in gs.clone().enumerate() {
                        // SAFETY: AVX2 as above; the group holds `nb` group blocks and `buf`
                        // has room for `chunk` groups' unpacked form.
                        unsafe {
                            (u.unpack)(p.group(g).as_ptr(), nb, buf[i * group_len..].as_mut_ptr())
                        };
                    }
                    for c0 in (0..t).step_by(panel) {
                        let c1 = (c0 + panel).min(t);
                        for (i, g) in gs.clone().enumerate() {
                            let w = buf[i * group_len..].as_ptr();
                            run_rows(u.gemm, u.max_mr, w, g, c0..c1);
                        }
                    }
                }
            });
            return;
        }
        // A whole number of kernel calls per panel: no short call at each panel's end.
        let max_mr = few_rows_mr.unwrap_or(kern.max_mr);
        let panel = ACT_PANEL - ACT_PANEL % max_mr;
        let gemm: &[GemmFn] = match vnni {
            Some(v) => v,
            None => kern.gemm,
        };
        for c0 in (0..t).step_by(panel) {
            let c1 = (c0 + panel).min(t);
            for g in g_range.clone() {
                run_rows(gemm, max_mr, p.group(g).as_ptr(), g, c0..c1);
            }
        }
    };
    if n_tasks == 1 {
        task(0);
    } else {
        parallel::run(n_tasks, &task);
    }
}

/// Writes each activation block's scales as f32 into `scales`, block-major: `d` of block `ib`
/// of row `ti` at `ib * t + ti`, and for Q8_1 `s` at `nb * t + ib * t + ti`.
fn fill_scales(act: &[u8], a_row: usize, vdt: GgmlType, k: usize, t: usize, scales: &mut Vec<f32>) {
    let nb = k / 32;
    let ab = vdt.type_size();
    let has_s = vdt == GgmlType::Q8_1;
    let len = if has_s { 2 * nb * t } else { nb * t };
    scales.clear();
    scales.resize(len, 0.0);
    let (d, s) = scales.split_at_mut(nb * t);
    for (ti, ar) in act.chunks_exact(a_row).enumerate() {
        for (ib, blk) in ar.chunks_exact(ab).enumerate() {
            d[ib * t + ti] = half::f16::from_le_bytes([blk[0], blk[1]]).to_f32();
            if has_s {
                s[ib * t + ti] = half::f16::from_le_bytes([blk[2], blk[3]]).to_f32();
            }
        }
    }
}

/// The register-tiled product for the types `quant/tile.rs` covers (AVX2 only).
#[allow(clippy::too_many_arguments)]
fn tiled(
    tiles: &TileTable,
    w: &[u8],
    w_row: usize,
    n: usize,
    k: usize,
    act: &[u8],
    a_row: usize,
    t: usize,
    scales: &[f32],
    y: &mut [f32],
) {
    let nb = k / 32;
    let (mr_max, nr_max) = (GEMM_MR, GEMM_NR);
    debug_assert!(mr_max <= MAX_MR && nr_max <= MAX_NR && mr_max * nr_max <= 8);
    let (d, s) = scales.split_at(nb * t);
    // Q8_0 activations have no `s`; the signed kernels never read it.
    let s = if s.is_empty() { d } else { s };

    let threads = parallel::num_threads().max(1);
    let n_tasks = if threads == 1 || w.len().saturating_mul(t) < MIN_PARALLEL_WORK {
        1
    } else {
        (threads * TASKS_PER_THREAD).min(n.div_ceil(nr_max))
    };
    let rows_per_task = n.div_ceil(n_tasks).next_multiple_of(nr_max);
    let n_tasks = n.div_ceil(rows_per_task);
    let out = OutPtr(y.as_mut_ptr());

    let task = |task: usize| {
        let rows = task * rows_per_task..((task + 1) * rows_per_task).min(n);
        for c0 in (0..t).step_by(ACT_PANEL) {
            let c1 = (c0 + ACT_PANEL).min(t);
            let mut j = rows.start;
            while j < rows.end {
                let nr = nr_max.min(rows.end - j);
                let mut i = c0;
                while i < c1 {
                    let mr = mr_max.min(c1 - i);
                    let Some(f) = tiles[mr - 1][nr - 1] else {
                        unreachable!("tile {mr} x {nr} is not instantiated")
                    };
                    let sc = ActScales {
                        d: d[i..].as_ptr(),
                        s: s[i..].as_ptr(),
                        ld: t,
                    };
                    // SAFETY: `tiles` only comes from `tile::tiles` at the Avx2 level, which
                    // `dispatch::dot_kernels` checked this CPU runs. Rows i..i+mr < t and
                    // j..j+nr < n are in bounds of `act` (t rows of a_row bytes), the scales
                    // (block-major, ld = t) and `w` (n rows of w_row bytes, nb blocks each);
                    // outputs (i.., j..) with stride n are inside `y` and only this task writes
                    // columns `rows`.
                    unsafe {
                        f(
                            w.as_ptr().add(j * w_row),
                            w_row,
                            act.as_ptr().add(i * a_row),
                            a_row,
                            sc,
                            nb,
                            out.at(i * n + j),
                            n,
                        )
                    };
                    i += mr;
                }
                j += nr;
            }
        }
    };
    if n_tasks == 1 {
        task(0);
    } else {
        parallel::run(n_tasks, &task);
    }
}

/// A packed product's output: column ranges `[start_i, start_i + width_i)` in row-major
/// buffers of their own, `width_i` apart (one part: the plain `[t][n]` output).
struct Outputs {
    parts: [(usize, usize, OutPtr); MAX_OUT_PARTS],
    n_parts: usize,
}

impl Outputs {
    /// # Panics
    /// On more than [`MAX_OUT_PARTS`] parts, a part but the last not a multiple of 8 columns
    /// wide, or widths that do not add up to `n` columns of `t` rows.
    fn new(outs: &mut [&mut [f32]], t: usize, n: usize) -> Self {
        assert!(
            !outs.is_empty() && outs.len() <= MAX_OUT_PARTS,
            "1..={MAX_OUT_PARTS} output parts"
        );
        let mut parts = [(0, 0, OutPtr(std::ptr::null_mut())); MAX_OUT_PARTS];
        let mut start = 0;
        let n_parts = outs.len();
        for (i, o) in outs.iter_mut().enumerate() {
            let width = o.len() / t;
            assert_eq!(o.len(), t * width, "output part {i} is not {t} rows");
            assert!(
                i + 1 == n_parts || width.is_multiple_of(GROUP_ROWS),
                "output part {i} is {width} columns: not whole 8-row groups"
            );
            parts[i] = (start, width, OutPtr(o.as_mut_ptr()));
            start += width;
        }
        assert_eq!(start, n, "output parts of {start} columns for {n} rows");
        Outputs { parts, n_parts }
    }

    /// Pointer to output (row `i`, column `j`) and the row stride of its part.
    ///
    /// # Safety
    /// `i < t` and `j < n`.
    #[inline(always)]
    unsafe fn at(&self, i: usize, j: usize) -> (*mut f32, usize) {
        let mut part = &self.parts[0];
        for p in &self.parts[1..self.n_parts] {
            if j >= p.0 {
                part = p;
            }
        }
        let (start, width, ptr) = part;
        // SAFETY: (i, j) lies in this part: j - start < width, i < t.
        (unsafe { ptr.at(i * width + j - start) }, *width)
    }

    /// # Safety
    /// As [`Outputs::at`], and no other thread writes (i, j) concurrently.
    #[inline(always)]
    unsafe fn write(&self, i: usize, j: usize, v: f32) {
        // SAFETY: the caller's contract.
        unsafe { self.at(i, j).0.write(v) };
    }
}

/// The output buffer shared by the tasks; each task writes only its own columns (weight rows),
/// so writes never overlap.
#[derive(Clone, Copy)]
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

    /// Pointer to element `i` (a method, so closures capture the `Sync` wrapper, not the field).
    ///
    /// # Safety
    /// `i` is within the output.
    #[inline(always)]
    unsafe fn at(&self, i: usize) -> *mut f32 {
        unsafe { self.0.add(i) }
    }
}
