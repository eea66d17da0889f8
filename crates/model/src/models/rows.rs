//! The row-wise passes between a block's matmuls (norms, residual adds, the gated activation),
//! split across the kernel pool by `parallel::for_rows` when the batch is prompt-sized. Every row
//! is computed exactly as on one thread, so the split never changes a bit.

use pagoda_kernels::{ops, parallel};

/// `out[r] = rms_norm(x[r]) * w` for each of the `x.len() / w.len()` rows.
pub(crate) fn rms_norm_into(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let d = w.len();
    parallel::for_rows(out.len() / d, [out], &|r, [o]| {
        for (src, dst) in x[r.start * d..r.end * d]
            .chunks_exact(d)
            .zip(o.chunks_exact_mut(d))
        {
            ops::rms_norm(src, w, eps, dst);
        }
    });
}

/// `x += y` over `rows` rows (the residual add).
pub(crate) fn add(x: &mut [f32], y: &[f32], rows: usize) {
    if rows == 0 {
        return;
    }
    let d = x.len() / rows;
    parallel::for_rows(rows, [x], &|r, [part]| {
        ops::add_inplace(part, &y[r.start * d..r.end * d]);
    });
}

/// `x += rms_norm(y) * w` per row, `y` normed in place (Gemma 3's post-attention and post-FFN
/// norms before the residual add).
pub(crate) fn add_normed(x: &mut [f32], y: &mut [f32], w: &[f32], eps: f32) {
    let d = w.len();
    parallel::for_rows(x.len() / d, [x, y], &|_, [xp, yp]| {
        ops::rms_norm_rows(yp, w, eps);
        ops::add_inplace(xp, yp);
    });
}

/// `gate[r] = act(gate[r]) * up[r]` in place, rows of `n`.
pub(crate) fn gated_rows(
    gate: &mut [f32],
    up: &[f32],
    n: usize,
    gated: &(dyn Fn(&mut [f32], &[f32]) + Sync),
) {
    parallel::for_rows(gate.len() / n, [gate], &|r, [g]| {
        let ups = up[r.start * n..r.end * n].chunks_exact(n);
        for (gr, ur) in g.chunks_exact_mut(n).zip(ups) {
            gated(gr, ur);
        }
    });
}
