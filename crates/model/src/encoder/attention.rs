//! Bidirectional attention of a pass's whole sequences: the kernels' `bidirectional_attention`
//! over the packed rows (per sequence and head, Q.K^T and P.V on the GEMM tiles). No KV is
//! written or kept: a layer's K and V live only as long as its projections' outputs.

use pagoda_kernels::attention::{Heads, bidirectional_attention};

/// Where each sequence of a pass starts among its packed rows; reused across passes.
#[derive(Default)]
pub(crate) struct SeqAttention {
    starts: Vec<usize>,
}

impl SeqAttention {
    /// Lays out sequences of `lens` tokens, one after another, for the layers of one pass.
    pub(crate) fn plan(&mut self, lens: &[usize]) {
        self.starts.clear();
        self.starts.push(0);
        let mut end = 0;
        for &n in lens {
            end += n;
            self.starts.push(end);
        }
    }

    /// `out[t][n_heads * head_dim]` = each planned sequence's queries `q` attending to its own
    /// keys `k` and values `v` (`[t][n_kv_heads * head_dim]`), all of them or, with `window`,
    /// those with `|i - j| < window`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn attend(
        &self,
        (n_heads, n_kv_heads, head_dim): (usize, usize, usize),
        scale: f32,
        window: Option<u32>,
        q: &[f32],
        k: &[f32],
        v: &[f32],
        out: &mut [f32],
    ) {
        let heads = Heads {
            n_heads,
            n_kv_heads,
            head_dim,
        };
        bidirectional_attention(&self.starts, heads, scale, window, q, k, v, out);
    }
}
