//! A float weight matrix repacked once at load for [`super::gemm_f32`]: `n` rows (output
//! columns of the product) of `k` values in panels of [`NR`] rows, each panel k-major (the 16
//! values of one k side by side), so the micro-kernel reads a panel's next k as two aligned
//! 32-byte loads. The last panel is padded with zero rows.

use crate::huge_pages::HugeBuffer;
use crate::parallel;

/// Output columns per panel: the two 8-lane registers of one micro-kernel row.
pub const NR: usize = 16;

/// `n` x `k` weights in panel layout: panel `p`'s value for (row `p * NR + j`, column `kk`) at
/// `p * k * NR + kk * NR + j`.
pub struct F32Panels {
    n: usize,
    k: usize,
    data: HugeBuffer,
}

impl std::fmt::Debug for F32Panels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("F32Panels")
            .field("n", &self.n)
            .field("k", &self.k)
            .finish()
    }
}

impl F32Panels {
    /// Packs `n` rows of `k` values; `row(r, out)` writes row `r` as f32 into `out` (`k`
    /// values), so f16/bf16/f32 sources all come through the one packer.
    pub fn pack(n: usize, k: usize, row: impl Fn(usize, &mut [f32]) + Sync) -> Self {
        let panels = n.div_ceil(NR);
        let panel_len = k * NR;
        let mut data = HugeBuffer::zeroed(panels * panel_len * 4);
        let out = parallel::SharedMut::new(&mut data);
        // Packing walks the whole matrix once: both threads halve the load's share of it.
        let per_task = panels.div_ceil(parallel::num_threads().max(1) * 4).max(1);
        parallel::run(panels.div_ceil(per_task), &|task| {
            let (p0, p1) = (task * per_task, ((task + 1) * per_task).min(panels));
            let mut buf = vec![0f32; k];
            for p in p0..p1 {
                // SAFETY: tasks cover disjoint panel ranges of `data`.
                let dst = unsafe { out.slice_mut(p * panel_len * 4, panel_len * 4) };
                for j in 0..NR.min(n - p * NR) {
                    row(p * NR + j, &mut buf);
                    for (kk, v) in buf.iter().enumerate() {
                        let at = (kk * NR + j) * 4;
                        dst[at..at + 4].copy_from_slice(&v.to_ne_bytes());
                    }
                }
            }
        });
        Self { n, k, data }
    }

    /// Packs a row-major `n` x `k` f32 matrix.
    ///
    /// # Panics
    /// If `w` is not `n * k` values (a caller bug).
    pub fn from_rows(n: usize, k: usize, w: &[f32]) -> Self {
        assert_eq!(w.len(), n * k, "f32 weight of {n} x {k}");
        Self::pack(n, k, |r, out| out.copy_from_slice(&w[r * k..(r + 1) * k]))
    }

    /// Rows of the matrix (output columns of the product).
    pub fn rows(&self) -> usize {
        self.n
    }

    /// Values per row (the product's inner dimension).
    pub fn cols(&self) -> usize {
        self.k
    }

    /// Bytes held.
    pub fn len_bytes(&self) -> usize {
        self.data.len()
    }

    /// Panel `p` from column `k0` on: `(k - k0) * NR` values, 64-byte aligned when `k0` is.
    ///
    /// # Safety
    /// `p < n.div_ceil(NR)` and `k0 <= k`.
    #[inline]
    pub(super) unsafe fn panel(&self, p: usize, k0: usize) -> *const f32 {
        // SAFETY: the buffer holds `panels * k * NR` f32 values from a 64-byte aligned start.
        unsafe { (self.data.as_ptr() as *const f32).add(p * self.k * NR + k0 * NR) }
    }
}
