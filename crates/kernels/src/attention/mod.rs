//! Paged attention over one layer's KV arena, for a batch mixing prefill chunks and decodes.
//!
//! Arena layout, one for K and one for V, of f32 or f16 elements ([`KvElement`]; f16 halves the
//! bytes attention reads and is llama.cpp's default KV type):
//! ```text
//! [num_blocks][num_kv_heads][block_size][head_dim]
//!  block b = block_tables[s][pos / block_size], slot offset = pos % block_size
//! ```
//! Query `i` of request `s` sits at `p = seq_len - q_len + i` and sees keys `p' <= p` (and with a
//! sliding window `W`, only `p - p' < W`: llama.cpp's gemma3 SWA mask).
//!
//! Work item = (request, kv head, chunk of queries). An item keeps one online-softmax state
//! (running max `m`, sum `l`, accumulator) per (query, head-of-the-group) row and walks the
//! needed keys once, in tiles of `KEY_TILE` positions: each tile of its kv head is read once for
//! every query head that shares it (GQA) and every query of the chunk. Tiles are aligned to
//! positions, not to blocks, so the float operations (and the result, bit for bit) do not depend
//! on the block size; a tile that straddles blocks (or any f16 tile) is gathered into f32 first,
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
    fn from_f32(src: &[f32], dst: &mut [Self]) {
        dst.convert_from_f32_slice(src);
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
/// (`= block * block_size + offset`).
pub fn write_kv<T: KvElement>(
    layout: &KvLayout,
    k_cache: &mut [T],
    v_cache: &mut [T],
    slot_mapping: &[u32],
    k: &[f32],
    v: &[f32],
) {
    let (bs, nkv, hd) = (layout.block_size, layout.num_kv_heads, layout.head_dim);
    let row = nkv * hd;
    assert!(
        k_cache.len() == layout.arena_len() && v_cache.len() == layout.arena_len(),
        "write_kv: arena size"
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
            let dst = ((block * nkv + h) * bs + offset) * hd;
            T::from_f32(&k_tok[h * hd..(h + 1) * hd], &mut k_cache[dst..dst + hd]);
            T::from_f32(&v_tok[h * hd..(h + 1) * hd], &mut v_cache[dst..dst + hd]);
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
    batch: &AttnBatch,
    q: &[f32],
    n_heads: usize,
    scale: f32,
    sliding_window: Option<u32>,
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
        batch,
        q,
        n_heads,
        group,
        chunk_q,
        scale,
        window: sliding_window.map(|w| w as usize),
        avx2: use_avx2(level) && hd.is_multiple_of(8),
        f16c: use_f16c(level),
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

/// Everything a work item reads; shared by reference across the pool. It is `Sync` because all
/// fields are shared slices or plain values, except `out` and `partials`, whose writes are
/// disjoint (below).
struct Job<'a, T> {
    layout: KvLayout,
    k_cache: &'a [T],
    v_cache: &'a [T],
    batch: &'a AttnBatch<'a>,
    q: &'a [f32],
    n_heads: usize,
    group: usize,
    chunk_q: usize,
    scale: f32,
    window: Option<usize>,
    avx2: bool,
    /// f16 tiles are widened with F16C.
    f16c: bool,
    /// Tasks per item when items are split: task `k` of an item walks its `k`-th part (parts
    /// past the item's last do nothing).
    tasks_per_item: usize,
    /// Floats per (item, part) partial state: rows x (max, sum, acc[hd]).
    part_stride: usize,
    out: SharedMut<'a, f32>,
    /// `[item][part]` partial states of split items.
    partials: SharedMut<'a, f32>,
}

/// One online-softmax state per row: running max, sum and accumulator (`rows x head_dim`).
#[derive(Default)]
struct RowStates {
    max: Vec<f32>,
    sum: Vec<f32>,
    acc: Vec<f32>,
}

impl RowStates {
    fn reset(&mut self, rows: usize, hd: usize) {
        self.max.clear();
        self.max.resize(rows, f32::NEG_INFINITY);
        self.sum.clear();
        self.sum.resize(rows, 0.0);
        self.acc.clear();
        self.acc.resize(rows * hd, 0.0);
    }
}

/// Per-thread state, grown on demand and reused across calls.
#[derive(Default)]
struct Scratch {
    /// The part being walked.
    part: RowStates,
    /// The parts walked so far, combined.
    total: RowStates,
    scores: Vec<f32>,
    /// One tile of K and V rows when the tile straddles blocks.
    k_tile: Vec<f32>,
    v_tile: Vec<f32>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// Where a work item's rows are and which keys they need.
struct Span {
    /// Request, kv head.
    s: usize,
    g: usize,
    /// First token row of the item: `query_start_loc[s] + i0`.
    row0: usize,
    /// Queries in the item and their state rows (`nq * group`).
    nq: usize,
    rows: usize,
    /// Positions of the first and last query.
    first_pos: usize,
    last_pos: usize,
    /// First key any query of the item sees.
    key_lo: usize,
}

impl Span {
    /// Parts (absolute: part `j` holds keys `j * PART_TILES * KEY_TILE..`) the item's keys touch.
    fn parts(&self) -> std::ops::Range<usize> {
        let part_keys = PART_TILES * KEY_TILE;
        self.key_lo / part_keys..self.last_pos / part_keys + 1
    }
}

/// Folds one part's state of a row (`m_k`, `l_k`, `acc_k`) into the row's combined state, both
/// rescaled to the larger max. Parts where the row has no keys add nothing.
fn combine(max: &mut f32, sum: &mut f32, acc: &mut [f32], m_k: f32, l_k: f32, acc_k: &[f32]) {
    if m_k == f32::NEG_INFINITY {
        return;
    }
    let m = max.max(m_k);
    let (a, b) = ((*max - m).exp(), (m_k - m).exp());
    *sum = *sum * a + l_k * b;
    for (x, &y) in acc.iter_mut().zip(acc_k) {
        *x = *x * a + y * b;
    }
    *max = m;
}

impl<T: KvElement> Job<'_, T> {
    fn q_len(&self, s: usize) -> usize {
        (self.batch.query_start_loc[s + 1] - self.batch.query_start_loc[s]) as usize
    }

    /// Item -> (request, kv head, query chunk). Within a request the last (longest, causal)
    /// chunks come first so the dynamic claiming in `parallel::run` balances the tail.
    fn locate(&self, mut item: usize) -> (usize, usize, usize) {
        let nkv = self.layout.num_kv_heads;
        for s in 0..self.batch.seq_lens.len() {
            let chunks = self.q_len(s).div_ceil(self.chunk_q);
            if item < chunks * nkv {
                return (s, item % nkv, chunks - 1 - item / nkv);
            }
            item -= chunks * nkv;
        }
        unreachable!("work item past the batch")
    }

    fn span(&self, item: usize) -> Span {
        let (s, g, c) = self.locate(item);
        let (q_len, seq_len) = (self.q_len(s), self.batch.seq_lens[s] as usize);
        let i0 = c * self.chunk_q;
        let nq = self.chunk_q.min(q_len - i0);
        let first_pos = seq_len - q_len + i0;
        Span {
            s,
            g,
            row0: self.batch.query_start_loc[s] as usize + i0,
            nq,
            rows: nq * self.group,
            first_pos,
            last_pos: first_pos + nq - 1,
            key_lo: self.window_start(first_pos),
        }
    }

    /// First key query position `p` sees.
    fn window_start(&self, p: usize) -> usize {
        self.window.map_or(0, |w| (p + 1).saturating_sub(w))
    }

    /// Runs work item `item` whole: its parts in order, combined, then written to `out`.
    fn run_item(&self, item: usize) {
        let span = self.span(item);
        let hd = self.layout.head_dim;
        SCRATCH.with_borrow_mut(|sc| {
            sc.total.reset(span.rows, hd);
            for part in span.parts() {
                self.walk_part(&span, part, sc);
                let (t, p) = (&mut sc.total, &sc.part);
                for r in 0..span.rows {
                    combine(
                        &mut t.max[r],
                        &mut t.sum[r],
                        &mut t.acc[r * hd..(r + 1) * hd],
                        p.max[r],
                        p.sum[r],
                        &p.acc[r * hd..(r + 1) * hd],
                    );
                }
            }
            self.write_out(&span, &sc.total);
        });
    }

    /// Runs the `k`-th part of a split item into its slot of `partials`.
    fn run_part(&self, item: usize, k: usize) {
        let span = self.span(item);
        let part = span.parts().start + k;
        if part >= span.parts().end {
            return;
        }
        let (rows, hd) = (span.rows, self.layout.head_dim);
        SCRATCH.with_borrow_mut(|sc| {
            self.walk_part(&span, part, sc);
            let task = item * self.tasks_per_item + k;
            // SAFETY: each (item, part) task owns its own stride of the partials buffer.
            let dst = unsafe {
                self.partials
                    .slice_mut(task * self.part_stride, rows * (hd + 2))
            };
            dst[..rows].copy_from_slice(&sc.part.max);
            dst[rows..2 * rows].copy_from_slice(&sc.part.sum);
            dst[2 * rows..].copy_from_slice(&sc.part.acc);
        });
    }

    /// Combines the parts of split `item` in order, exactly as `run_item` does, and writes `out`.
    /// Runs on the caller after the pool is done.
    fn merge_parts(&self, item: usize) {
        let span = self.span(item);
        let (rows, hd) = (span.rows, self.layout.head_dim);
        // SAFETY: the pool has finished, so this is the only live slice of `partials`.
        let parts = unsafe { self.partials.slice_mut(0, self.partials.len()) };
        SCRATCH.with_borrow_mut(|sc| {
            let t = &mut sc.total;
            t.reset(rows, hd);
            for k in 0..span.parts().len() {
                let p = &parts[(item * self.tasks_per_item + k) * self.part_stride..]
                    [..rows * (hd + 2)];
                for r in 0..rows {
                    combine(
                        &mut t.max[r],
                        &mut t.sum[r],
                        &mut t.acc[r * hd..(r + 1) * hd],
                        p[r],
                        p[rows + r],
                        &p[2 * rows + r * hd..][..hd],
                    );
                }
            }
            self.write_out(&span, &sc.total);
        });
    }

    /// `out = acc / sum` for every row of the item.
    fn write_out(&self, span: &Span, st: &RowStates) {
        let (hd, group) = (self.layout.head_dim, self.group);
        for qi in 0..span.nq {
            let start = ((span.row0 + qi) * self.n_heads + span.g * group) * hd;
            // SAFETY: item (s, g, c) alone writes query rows row0.. of request s, heads of
            // group g: rows differ across (s, c), head ranges across g, so ranges are disjoint.
            let dst = unsafe { self.out.slice_mut(start, group * hd) };
            for hh in 0..group {
                let r = qi * group + hh;
                let inv = if st.sum[r] > 0.0 {
                    1.0 / st.sum[r]
                } else {
                    0.0
                };
                for (o, &a) in dst[hh * hd..(hh + 1) * hd]
                    .iter_mut()
                    .zip(&st.acc[r * hd..(r + 1) * hd])
                {
                    *o = a * inv;
                }
            }
        }
    }

    /// Folds the keys of absolute part `part` into fresh per-row states `sc.part`.
    fn walk_part(&self, span: &Span, part: usize, sc: &mut Scratch) {
        let KvLayout {
            block_size: bs,
            num_kv_heads: nkv,
            head_dim: hd,
            ..
        } = self.layout;
        let group = self.group;
        sc.part.reset(span.rows, hd);
        sc.scores.resize(KEY_TILE, 0.0);
        sc.k_tile.resize(KEY_TILE * hd, 0.0);
        sc.v_tile.resize(KEY_TILE * hd, 0.0);
        let Scratch {
            part: st,
            scores,
            k_tile,
            v_tile,
            ..
        } = sc;

        let (key_lo, last_pos) = (span.key_lo, span.last_pos);
        let table = &self.batch.block_tables[span.s * self.batch.max_blocks_per_seq..];
        let tiles = (part * PART_TILES).max(key_lo / KEY_TILE)
            ..((part + 1) * PART_TILES).min(last_pos / KEY_TILE + 1);
        let tiles_end = tiles.end;
        for tile in tiles {
            // Keys this item needs from the tile: [t_lo, t_hi).
            let t_lo = (tile * KEY_TILE).max(key_lo);
            let t_hi = ((tile + 1) * KEY_TILE).min(last_pos + 1);
            let n = (t_hi - t_lo) * hd;
            let in_block = t_lo / bs == (t_hi - 1) / bs;
            let base = ((table[t_lo / bs] as usize * nkv + span.g) * bs + t_lo % bs) * hd;
            // Blocks are scattered, so the hardware prefetcher starts every tile cold; ask for
            // the next tile's keys and values while this one is computed.
            #[cfg(target_arch = "x86_64")]
            if tile + 1 < tiles_end {
                let next = (tile + 1) * KEY_TILE;
                let len = (KEY_TILE.min(last_pos + 1 - next)).min(bs - next % bs) * hd;
                let at = ((table[next / bs] as usize * nkv + span.g) * bs + next % bs) * hd;
                let bytes = len * std::mem::size_of::<T>();
                avx2::prefetch(self.k_cache[at..].as_ptr().cast(), bytes);
                avx2::prefetch(self.v_cache[at..].as_ptr().cast(), bytes);
            }
            let (k_run, v_run) = if in_block {
                let (k, v) = (&self.k_cache[base..base + n], &self.v_cache[base..base + n]);
                match T::as_f32(k).zip(T::as_f32(v)) {
                    // Within one block of f32: read the arena in place.
                    Some(kv) => kv,
                    None => {
                        T::widen(k, &mut k_tile[..n], self.f16c);
                        T::widen(v, &mut v_tile[..n], self.f16c);
                        (&k_tile[..n], &v_tile[..n])
                    }
                }
            } else {
                for (i, pos) in (t_lo..t_hi).enumerate() {
                    let at = ((table[pos / bs] as usize * nkv + span.g) * bs + pos % bs) * hd;
                    T::widen(
                        &self.k_cache[at..at + hd],
                        &mut k_tile[i * hd..][..hd],
                        self.f16c,
                    );
                    T::widen(
                        &self.v_cache[at..at + hd],
                        &mut v_tile[i * hd..][..hd],
                        self.f16c,
                    );
                }
                (&k_tile[..n], &v_tile[..n])
            };
            for qi in 0..span.nq {
                let p = span.first_pos + qi;
                let lo = self.window_start(p).max(t_lo);
                let hi = (p + 1).min(t_hi);
                if lo >= hi {
                    continue;
                }
                let (k_rows, v_rows) = (
                    &k_run[(lo - t_lo) * hd..(hi - t_lo) * hd],
                    &v_run[(lo - t_lo) * hd..(hi - t_lo) * hd],
                );
                let scores = &mut scores[..hi - lo];
                for hh in 0..group {
                    let r = qi * group + hh;
                    let q_row = &self.q
                        [((span.row0 + qi) * self.n_heads + span.g * group + hh) * hd..][..hd];
                    self.update_row(
                        q_row,
                        k_rows,
                        v_rows,
                        scores,
                        &mut st.max[r],
                        &mut st.sum[r],
                        &mut st.acc[r * hd..(r + 1) * hd],
                    );
                }
            }
        }
    }

    /// Folds keys `k_rows` (n x hd) into one row's online softmax: scores, new running max,
    /// rescale of the old sum and accumulator, then `acc += sum_k exp(s_k - m) v_k`.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn update_row(
        &self,
        q_row: &[f32],
        k_rows: &[f32],
        v_rows: &[f32],
        scores: &mut [f32],
        max: &mut f32,
        sum: &mut f32,
        acc: &mut [f32],
    ) {
        #[cfg(target_arch = "x86_64")]
        if self.avx2 {
            // SAFETY: `avx2` is only set after run-time detection and when head_dim % 8 == 0;
            // slice lengths are n * head_dim for k/v rows, head_dim for q and acc.
            unsafe { avx2::update_row(q_row, k_rows, v_rows, self.scale, scores, max, sum, acc) };
            return;
        }
        scalar_update_row(q_row, k_rows, v_rows, self.scale, scores, max, sum, acc);
    }
}

#[allow(clippy::too_many_arguments)]
fn scalar_update_row(
    q_row: &[f32],
    k_rows: &[f32],
    v_rows: &[f32],
    scale: f32,
    scores: &mut [f32],
    max: &mut f32,
    sum: &mut f32,
    acc: &mut [f32],
) {
    let hd = q_row.len();
    let mut m_new = *max;
    for (sc, k) in scores.iter_mut().zip(k_rows.chunks_exact(hd)) {
        *sc = q_row.iter().zip(k).map(|(a, b)| a * b).sum::<f32>() * scale;
        m_new = m_new.max(*sc);
    }
    let alpha = (*max - m_new).exp();
    let mut block_sum = 0.0;
    for sc in scores.iter_mut() {
        *sc = (*sc - m_new).exp();
        block_sum += *sc;
    }
    *sum = *sum * alpha + block_sum;
    *max = m_new;
    for a in acc.iter_mut() {
        *a *= alpha;
    }
    for (&w, v) in scores.iter().zip(v_rows.chunks_exact(hd)) {
        for (a, &x) in acc.iter_mut().zip(v) {
            *a += w * x;
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2;
