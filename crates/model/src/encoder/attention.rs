//! Bidirectional attention of whole sequences through the paged-attention kernel: a layer's K
//! and V are written to a scratch f32 arena (each sequence starting on a block of its own) and
//! the kernel runs with `Mask::Bidirectional`. One arena serves every layer of a pass: a layer
//! reads its K and V before the next one writes.

use pagoda_kernels::attention::{
    AttnBatch, KvLayout, KvScales, KvScalesMut, Mask, paged_attention_masked, write_kv,
};

/// Slots per block: the kernel's key tile, so tiles never straddle blocks and are read in place.
const BLOCK: usize = 16;

/// The arena and block tables of one pass's sequences; grown on demand, reused across passes.
#[derive(Default)]
pub(crate) struct SeqAttention {
    k: Vec<f32>,
    v: Vec<f32>,
    num_blocks: usize,
    max_blocks: usize,
    slots: Vec<u32>,
    block_tables: Vec<u32>,
    query_start_loc: Vec<u32>,
    seq_lens: Vec<u32>,
}

impl SeqAttention {
    /// Lays out sequences of `lens` tokens, one after another, for the layers of one pass.
    pub(crate) fn plan(&mut self, lens: &[usize]) {
        self.max_blocks = lens.iter().map(|n| n.div_ceil(BLOCK)).max().unwrap_or(0);
        self.slots.clear();
        self.block_tables.clear();
        self.seq_lens.clear();
        self.query_start_loc.clear();
        self.query_start_loc.push(0);
        let mut next = 0usize;
        for &n in lens {
            let blocks = n.div_ceil(BLOCK);
            // Entries past a sequence's blocks are never read (its keys end at its length).
            self.block_tables
                .extend((0..self.max_blocks).map(|j| (next + j.min(blocks)) as u32));
            self.slots.extend((0..n).map(|i| (next * BLOCK + i) as u32));
            next += blocks;
            self.seq_lens.push(n as u32);
            let end = self.query_start_loc.last().copied().unwrap_or(0) + n as u32;
            self.query_start_loc.push(end);
        }
        self.num_blocks = next;
    }

    /// `out[t][n_heads * head_dim]` = each planned sequence's queries `q` attending to its own
    /// keys `k` and values `v` (`[t][n_kv_heads * head_dim]`), all of them or, with `window`,
    /// those with `|i - j| < window`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn attend(
        &mut self,
        (n_heads, n_kv_heads, head_dim): (usize, usize, usize),
        scale: f32,
        window: Option<u32>,
        q: &[f32],
        k: &[f32],
        v: &[f32],
        out: &mut [f32],
    ) {
        let layout = KvLayout {
            num_blocks: self.num_blocks,
            block_size: BLOCK,
            num_kv_heads: n_kv_heads,
            head_dim,
        };
        self.k.resize(layout.arena_len(), 0.0);
        self.v.resize(layout.arena_len(), 0.0);
        let (k_arena, v_arena) = (
            &mut self.k[..layout.arena_len()],
            &mut self.v[..layout.arena_len()],
        );
        write_kv(
            &layout,
            k_arena,
            v_arena,
            KvScalesMut::none(),
            &self.slots,
            k,
            v,
        );
        let batch = AttnBatch {
            query_start_loc: &self.query_start_loc,
            seq_lens: &self.seq_lens,
            block_tables: &self.block_tables,
            max_blocks_per_seq: self.max_blocks,
        };
        paged_attention_masked(
            &layout,
            &self.k[..layout.arena_len()],
            &self.v[..layout.arena_len()],
            KvScales::NONE,
            &batch,
            q,
            n_heads,
            scale,
            Mask::Bidirectional { window },
            out,
        );
    }
}
