//! Paged attention over one layer's KV arena, for a batch mixing prefill chunks and decodes.
//!
//! Arena layout, one for K and one for V, of f32, f16 or int8 elements ([`KvElement`]; f16 halves
//! the bytes attention reads and is llama.cpp's default KV type; int8 halves them again):
//! ```text
//! [num_blocks][num_kv_heads][block_size][head_dim]
//!  block b = block_tables[s][pos / block_size], slot offset = pos % block_size
//! ```
//! int8 arenas carry one f32 scale per (block, kv head, slot) in [`KvScales`], laid out
//! `[num_blocks][num_kv_heads][block_size]`: the scale of the row at element index `i` is
//! `scales[i / head_dim]`, so a block's values and scales are both a function of its id.
//! Query `i` of request `s` sits at `p = seq_len - q_len + i` and sees keys `p' <= p` (and with a
//! sliding window `W`, only `p - p' < W`: llama.cpp's gemma3 SWA mask). With
//! [`Mask::Bidirectional`] (a whole sequence as the step's queries) it sees every key of its
//! sequence, and with a window only `|p - p'| < W`. The encoders do not come here: they run
//! `bidirectional.rs`, which needs no paged KV.
//!
//! Work item = (request, kv head, chunk of queries). An item keeps one online-softmax state
//! (running max `m`, sum `l`, accumulator) per (query, head-of-the-group) row and walks the
//! needed keys once, in tiles of `KEY_TILE` positions: each tile of its kv head is read once for
//! every query head that shares it (GQA) and every query of the chunk. Tiles are aligned to
//! positions, not to blocks, so the float operations (and the result, bit for bit) do not depend
//! on the block size; a tile that straddles blocks (or any f16/int8 tile) is gathered into f32 first,
//! once per item, so the inner loops are the same for both element types. Blocks wholly outside the
//! causal/window range are never touched.
//!
//! A row's keys are folded into one state per *part* of `PART_TILES` tiles (again aligned to
//! positions), and the parts' states are then combined in position order. That fixes every float
//! operation of a row by its position alone, so a few items can have their parts spread over the
//! threads (flash-decoding) without the result depending on the thread count or on what else is
//! in the batch. Items run on `parallel::run`; the scratch state is thread-local, so a
//! steady-state call allocates nothing.

use std::cell::RefCell;

use half::f16;
use half::slice::HalfFloatSliceExt;

use crate::cpu::{SimdLevel, simd_level};
use crate::ops::use_avx2;
use crate::parallel::{self, SharedMut};

mod bidirectional;
mod int8;
mod job;
pub use bidirectional::{Heads, bidirectional_attention, bidirectional_attention_at};
pub use int8::{dequantize_rows, quantize_row};
use job::Job;

/// State rows (queries x heads of a group) per work item: enough rows to reuse each K/V block
/// well, few enough that items of a 512-token prefill balance over the threads.
const ROWS_PER_ITEM: usize = 32;

/// Keys folded into the online softmax per step. The reduction order follows these
/// position-aligned tiles, never the block size: with block-aligned steps, blocks of 5 and of 16
/// rounded differently, and the model amplified that last-bit noise (through its 8-bit
/// activation quantization) into logit differences of ~10 on Gemma 3. 16 is the default block
/// size, so default-sized blocks need no gather.
const KEY_TILE: usize = 16;

/// Tiles per part (128 keys): parts bound the keys one task walks when an item is split across
/// threads; combining a part costs ~2 head_dim flops per row against ~256 per key of the part.
const PART_TILES: usize = 8;

/// Element type of a KV arena.
pub trait KvElement: Copy + Default + Send + Sync + 'static {
    /// Whether each (token, kv head) row is stored with a scale ([`KvScales`]).
    const SCALED: bool = false;
    /// The slice as f32 when it already is (read in place, no conversion).
    fn as_f32(s: &[Self]) -> Option<&[f32]>;
    /// `dst[i] = src[i]` widened to f32.
    fn to_f32(src: &[Self], dst: &mut [f32]);
    /// `dst[i] = src[i]` stored (f16: round to nearest even, as ggml's `GGML_FP32_TO_FP16`).
    fn from_f32(src: &[f32], dst: &mut [Self]);
    /// [`KvElement::to_f32`], with F16C when `f16c` (the caller checked the CPU has it).
    /// Widening is exact, so both ways give the same values.
    fn widen(src: &[Self], dst: &mut [f32], f16c: bool) {
        let _ = f16c;
        Self::to_f32(src, dst);
    }
    /// [`KvElement::from_f32`], with F16C when `f16c` (the caller checked the CPU has it): the
    /// same rounding, so the same stored values.
    fn narrow(src: &[f32], dst: &mut [Self], f16c: bool) {
        let _ = f16c;
        Self::from_f32(src, dst);
    }
    /// Whether this type's SIMD conversions ([`KvElement::widen_rows`], [`KvElement::narrow_row`])
    /// may run at `level`.
    fn simd(level: SimdLevel) -> bool {
        use_f16c(level)
    }
    /// Whole rows widened: `scales` has one entry per row for a scaled type (row `r` of
    /// `src.len() / scales.len()` values is multiplied by `scales[r]`) and is empty otherwise.
    fn widen_rows(src: &[Self], scales: &[f32], dst: &mut [f32], simd: bool) {
        let _ = scales;
        Self::widen(src, dst, simd);
    }
    /// One row stored; returns the row's scale (1 for an unscaled type, which stores none).
    fn narrow_row(src: &[f32], dst: &mut [Self], simd: bool) -> f32 {
        Self::narrow(src, dst, simd);
        1.0
    }
}

/// Per-row scales of a scaled arena's K and V (`[num_blocks][num_kv_heads][block_size]`);
/// empty for f32 and f16.
#[derive(Clone, Copy, Debug, Default)]
pub struct KvScales<'a> {
    pub k: &'a [f32],
    pub v: &'a [f32],
}

impl KvScales<'_> {
    /// No scales: the arena's type is unscaled.
    pub const NONE: KvScales<'static> = KvScales { k: &[], v: &[] };
}

/// The scales as [`write_kv`] fills them.
#[derive(Debug, Default)]
pub struct KvScalesMut<'a> {
    pub k: &'a mut [f32],
    pub v: &'a mut [f32],
}

impl KvScalesMut<'_> {
    /// No scales: the arena's type is unscaled.
    pub fn none() -> KvScalesMut<'static> {
        KvScalesMut {
            k: &mut [],
            v: &mut [],
        }
    }
}

/// Checks `scales` against `T` and `layout`: empty for unscaled types, one per row otherwise.
fn scales_fit<T: KvElement>(layout: &KvLayout, k: usize, v: usize) -> bool {
    let want = if T::SCALED { layout.scales_len() } else { 0 };
    k == want && v == want
}

impl KvElement for f32 {
    fn as_f32(s: &[Self]) -> Option<&[f32]> {
        Some(s)
    }
    fn to_f32(src: &[Self], dst: &mut [f32]) {
        dst.copy_from_slice(src);
    }
    fn from_f32(src: &[f32], dst: &mut [Self]) {
        dst.copy_from_slice(src);
    }
}

/// `half` converts slices with F16C when the CPU has it (run-time detection) and in software
/// otherwise; both round to nearest even, so the stored values do not depend on the CPU.
impl KvElement for f16 {
    fn as_f32(_: &[Self]) -> Option<&[f32]> {
        None
    }
    fn to_f32(src: &[Self], dst: &mut [f32]) {
        src.convert_to_f32_slice(dst);
    }
    /// Values beyond f16's range are stored as its largest finite value, not as infinities
    /// (which ggml stores, and which turn a row's softmax into NaN): still wrong, but bounded.
    fn from_f32(src: &[f32], dst: &mut [Self]) {
        const MAX: f32 = 65504.0;
        let mut buf = [0.0f32; 64];
        for (s, d) in src.chunks(64).zip(dst.chunks_mut(64)) {
            let b = &mut buf[..s.len()];
            for (b, &x) in b.iter_mut().zip(s) {
                *b = x.clamp(-MAX, MAX);
            }
            d.convert_from_f32_slice(b);
        }
    }
    /// Inlined F16C: `half`'s slice conversion (which detects the CPU on every call) was ~5 ns
    /// per value, 0.8% of a batch-1 decode step spent on the caller alone.
    fn narrow(src: &[f32], dst: &mut [Self], f16c: bool) {
        #[cfg(target_arch = "x86_64")]
        if f16c {
            // SAFETY: the caller checked AVX2 and F16C at run time; `f16` is a transparent u16.
            unsafe {
                avx2::f32_to_f16_saturating(
                    src,
                    std::slice::from_raw_parts_mut(dst.as_mut_ptr().cast::<u16>(), dst.len()),
                )
            };
            return;
        }
        let _ = f16c;
        <Self as KvElement>::from_f32(src, dst);
    }
    /// `half`'s slice conversion detects F16C and converts 8 values per call; inlined F16C
    /// is several times faster on the tiles attention widens.
    fn widen(src: &[Self], dst: &mut [f32], f16c: bool) {
        #[cfg(target_arch = "x86_64")]
        if f16c {
            // SAFETY: the caller checked AVX2 and F16C at run time; `f16` is a transparent u16.
            unsafe {
                avx2::f16_to_f32(
                    std::slice::from_raw_parts(src.as_ptr().cast::<u16>(), src.len()),
                    dst,
                )
            };
            return;
        }
        let _ = f16c;
        src.convert_to_f32_slice(dst);
    }
}

/// Shape of one layer's KV arena: `[num_blocks][num_kv_heads][block_size][head_dim]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvLayout {
    /// Blocks in the arena.
    pub num_blocks: usize,
    /// Token slots per block.
    pub block_size: usize,
    /// KV heads per token.
    pub num_kv_heads: usize,
    /// Values per head.
    pub head_dim: usize,
}

impl KvLayout {
    /// Elements in one arena (K or V).
    pub fn arena_len(&self) -> usize {
        self.num_blocks * self.num_kv_heads * self.block_size * self.head_dim
    }

    /// Scales of one scaled arena (K or V): one per (block, kv head, slot).
    pub fn scales_len(&self) -> usize {
        self.num_blocks * self.num_kv_heads * self.block_size
    }
}

/// The requests of one step, in vLLM's flattened form.
#[derive(Clone, Copy, Debug)]
pub struct AttnBatch<'a> {
    /// `[S + 1]`: request `s` owns query rows `query_start_loc[s]..query_start_loc[s + 1]`.
    pub query_start_loc: &'a [u32],
    /// `[S]`: context length of each request after this step (cached + new tokens).
    pub seq_lens: &'a [u32],
    /// `[S][max_blocks_per_seq]` flat: each request's block ids in position order.
    pub block_tables: &'a [u32],
    /// Row stride of `block_tables`.
    pub max_blocks_per_seq: usize,
}

/// Writes token `t`'s k and v (`[T][num_kv_heads * head_dim]`) to slot `slot_mapping[t]`
/// (`= block * block_size + offset`), and for a scaled type each row's scale to `scales`.
pub fn write_kv<T: KvElement>(
    layout: &KvLayout,
    k_cache: &mut [T],
    v_cache: &mut [T],
    scales: KvScalesMut<'_>,
    slot_mapping: &[u32],
    k: &[f32],
    v: &[f32],
) {
    let (bs, nkv, hd) = (layout.block_size, layout.num_kv_heads, layout.head_dim);
    let row = nkv * hd;
    let simd = T::simd(simd_level());
    assert!(
        k_cache.len() == layout.arena_len() && v_cache.len() == layout.arena_len(),
        "write_kv: arena size"
    );
    assert!(
        scales_fit::<T>(layout, scales.k.len(), scales.v.len()),
        "write_kv: scales size"
    );
    assert!(
        k.len() == slot_mapping.len() * row && v.len() == k.len(),
        "write_kv: k/v not [T][kv heads * head_dim]"
    );
    for ((&slot, k_tok), v_tok) in slot_mapping
        .iter()
        .zip(k.chunks_exact(row))
        .zip(v.chunks_exact(row))
    {
        let (block, offset) = (slot as usize / bs, slot as usize % bs);
        debug_assert!(
            block < layout.num_blocks,
            "write_kv: slot {slot} past the arena"
        );
        for h in 0..nkv {
            let at = (block * nkv + h) * bs + offset;
            let dst = at * hd;
            let ks = T::narrow_row(
                &k_tok[h * hd..(h + 1) * hd],
                &mut k_cache[dst..dst + hd],
                simd,
            );
            let vs = T::narrow_row(
                &v_tok[h * hd..(h + 1) * hd],
                &mut v_cache[dst..dst + hd],
                simd,
            );
            if T::SCALED {
                scales.k[at] = ks;
                scales.v[at] = vs;
            }
        }
    }
}

/// Which keys a query at position `p` sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mask {
    /// Keys `p' <= p`; with a window `W`, only `p - p' < W` (llama.cpp's gemma3 SWA mask).
    Causal { window: Option<u32> },
    /// Every key of the sequence; with a window `W`, only `|p - p'| < W` (transformers'
    /// `_bidirectional_window_overlay` for EmbeddingGemma). Meant for requests whose queries
    /// are their whole sequence: keys past `seq_len` do not exist, so none are seen.
    Bidirectional { window: Option<u32> },
}

impl Mask {
    fn window(self) -> Option<u32> {
        match self {
            Self::Causal { window } | Self::Bidirectional { window } => window,
        }
    }
}

/// Causal paged attention: `out = softmax(q k^T * scale + mask) v` per request and head.
/// `q`, `out`: `[T][n_heads * head_dim]`; query head `h` reads kv head `h / (n_heads / num_kv_heads)`.
#[allow(clippy::too_many_arguments)] // the signature is the model<->kernel contract
pub fn paged_attention<T: KvElement>(
    layout: &KvLayout,
    k_cache: &[T],
    v_cache: &[T],
    scales: KvScales<'_>,
    batch: &AttnBatch,
    q: &[f32],
    n_heads: usize,
    scale: f32,
    sliding_window: Option<u32>,
    out: &mut [f32],
) {
    paged_attention_with(
        simd_level(),
        layout,
        k_cache,
        v_cache,
        scales,
        batch,
        q,
        n_heads,
        scale,
        sliding_window,
        out,
    );
}

/// [`paged_attention`] on an explicit SIMD level.
#[allow(clippy::too_many_arguments)]
pub fn paged_attention_with<T: KvElement>(
    level: SimdLevel,
    layout: &KvLayout,
    k_cache: &[T],
    v_cache: &[T],
    scales: KvScales<'_>,
    batch: &AttnBatch,
    q: &[f32],
    n_heads: usize,
    scale: f32,
    sliding_window: Option<u32>,
    out: &mut [f32],
) {
    let mask = Mask::Causal {
        window: sliding_window,
    };
    paged_attention_masked_with(
        level, layout, k_cache, v_cache, scales, batch, q, n_heads, scale, mask, out,
    );
}

/// [`paged_attention`] with the keys each query sees chosen by `mask`.
#[allow(clippy::too_many_arguments)]
pub fn paged_attention_masked<T: KvElement>(
    layout: &KvLayout,
    k_cache: &[T],
    v_cache: &[T],
    scales: KvScales<'_>,
    batch: &AttnBatch,
    q: &[f32],
    n_heads: usize,
    scale: f32,
    mask: Mask,
    out: &mut [f32],
) {
    paged_attention_masked_with(
        simd_level(),
        layout,
        k_cache,
        v_cache,
        scales,
        batch,
        q,
        n_heads,
        scale,
        mask,
        out,
    );
}

/// [`paged_attention_masked`] on an explicit SIMD level.
#[allow(clippy::too_many_arguments)]
pub fn paged_attention_masked_with<T: KvElement>(
    level: SimdLevel,
    layout: &KvLayout,
    k_cache: &[T],
    v_cache: &[T],
    scales: KvScales<'_>,
    batch: &AttnBatch,
    q: &[f32],
    n_heads: usize,
    scale: f32,
    mask: Mask,
    out: &mut [f32],
) {
    let (nkv, hd) = (layout.num_kv_heads, layout.head_dim);
    let n_req = batch.seq_lens.len();
    assert!(
        nkv > 0 && n_heads.is_multiple_of(nkv),
        "paged_attention: {n_heads} heads not a multiple of {nkv} kv heads"
    );
    assert!(
        k_cache.len() == layout.arena_len() && v_cache.len() == layout.arena_len(),
        "paged_attention: arena size"
    );
    assert!(
        scales_fit::<T>(layout, scales.k.len(), scales.v.len()),
        "paged_attention: scales size"
    );
    assert_eq!(
        batch.query_start_loc.len(),
        n_req + 1,
        "paged_attention: query_start_loc is not [S + 1]"
    );
    assert!(
        batch.block_tables.len() >= n_req * batch.max_blocks_per_seq,
        "paged_attention: block_tables too short"
    );
    let n_tokens = batch.query_start_loc[n_req] as usize;
    assert!(
        q.len() == n_tokens * n_heads * hd && out.len() == q.len(),
        "paged_attention: q/out not [T][heads * head_dim]"
    );
    for s in 0..n_req {
        let (a, b) = (batch.query_start_loc[s], batch.query_start_loc[s + 1]);
        assert!(
            a <= b && b - a <= batch.seq_lens[s],
            "paged_attention: request {s} has more queries than context"
        );
        let blocks = (batch.seq_lens[s] as usize).div_ceil(layout.block_size.max(1));
        assert!(
            blocks <= batch.max_blocks_per_seq,
            "paged_attention: request {s} needs {blocks} blocks"
        );
    }

    let group = n_heads / nkv;
    let chunk_q = (ROWS_PER_ITEM / group).max(1);
    let chunks = |s: usize| {
        let q_len = (batch.query_start_loc[s + 1] - batch.query_start_loc[s]) as usize;
        q_len.div_ceil(chunk_q)
    };
    let n_items: usize = (0..n_req).map(|s| nkv * chunks(s)).sum();
    // Too few items to keep the pool busy (a lone decode, gemma's single kv head): run each part
    // of an item as its own task and combine the parts afterwards. Results are the same either
    // way (parts are combined in the same order), so this only decides the schedule.
    let threads = parallel::num_threads();
    let max_parts = (0..n_req)
        .map(|s| (batch.seq_lens[s] as usize).div_ceil(PART_TILES * KEY_TILE))
        .max()
        .unwrap_or(0);
    let part_stride = chunk_q * group * (hd + 2);
    let split = threads > 1
        && n_items < 4 * threads
        && max_parts > 1
        && n_items * max_parts * part_stride <= MAX_PARTIALS;
    let tasks_per_item = if split { max_parts } else { 1 };
    let mut partials = if split { PARTIALS.take() } else { Vec::new() };
    partials.resize(n_items * tasks_per_item * part_stride, 0.0);
    let job = Job {
        layout: *layout,
        k_cache,
        v_cache,
        scales,
        batch,
        q,
        n_heads,
        group,
        chunk_q,
        scale,
        window: mask.window().map(|w| w as usize),
        causal: matches!(mask, Mask::Causal { .. }),
        avx2: use_avx2(level) && hd.is_multiple_of(8),
        simd_widen: T::simd(level),
        tasks_per_item,
        part_stride,
        out: SharedMut::new(out),
        partials: SharedMut::new(&mut partials),
    };
    if split {
        parallel::run(n_items * tasks_per_item, &|task| {
            job.run_part(task / tasks_per_item, task % tasks_per_item)
        });
        for item in 0..n_items {
            job.merge_parts(item);
        }
        PARTIALS.set(partials);
    } else {
        parallel::run(n_items, &|item| job.run_item(item));
    }
}

/// Whether f16 tiles may be widened with F16C.
fn use_f16c(level: SimdLevel) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use_avx2(level) && std::is_x86_feature_detected!("f16c")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = level;
        false
    }
}

/// Most floats of split partial states a call may hold (16 MB); past it, items run whole.
const MAX_PARTIALS: usize = 1 << 22;

thread_local! {
    /// The caller's buffer of split partial states, reused across calls.
    static PARTIALS: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

#[cfg(target_arch = "x86_64")]
mod avx2;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_storage_saturates_instead_of_overflowing() {
        let src: Vec<f32> = (0..70)
            .map(|i| match i % 5 {
                0 => 1e6,
                1 => -1e9,
                2 => f32::INFINITY,
                3 => 0.1 * i as f32,
                _ => 65504.0,
            })
            .collect();
        let mut dst = vec![f16::ZERO; src.len()];
        <f16 as KvElement>::from_f32(&src, &mut dst);
        for (i, (&x, y)) in src.iter().zip(&dst).enumerate() {
            let y = y.to_f32();
            let want = x.clamp(-65504.0, 65504.0);
            assert!(y.is_finite(), "{i}: {x} stored as {y}");
            assert_eq!(y, f16::from_f32(want).to_f32(), "{i}: {x}");
        }
        let mut nan = [f16::ZERO];
        <f16 as KvElement>::from_f32(&[f32::NAN], &mut nan);
        assert!(nan[0].is_nan(), "NaN stays NaN");
    }
}
