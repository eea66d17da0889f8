//! The work item of paged attention: one (request, kv head, chunk of queries) walking its keys
//! in position-aligned tiles and parts, with the online-softmax state per row, the merge of a
//! split item's parts in position order, and the per-row update kernels' dispatch.

use std::cell::RefCell;

use super::{AttnBatch, KEY_TILE, KvElement, KvLayout, KvScales, PART_TILES};
use crate::parallel::SharedMut;

#[cfg(target_arch = "x86_64")]
use super::avx2;

/// Everything a work item reads; shared by reference across the pool. It is `Sync` because all
/// fields are shared slices or plain values, except `out` and `partials`, whose writes are
/// disjoint (below).
pub(super) struct Job<'a, T> {
    pub(super) layout: KvLayout,
    pub(super) k_cache: &'a [T],
    pub(super) v_cache: &'a [T],
    /// Per-row scales when `T` is scaled (int8), else empty.
    pub(super) scales: KvScales<'a>,
    pub(super) batch: &'a AttnBatch<'a>,
    pub(super) q: &'a [f32],
    pub(super) n_heads: usize,
    pub(super) group: usize,
    pub(super) chunk_q: usize,
    pub(super) scale: f32,
    pub(super) window: Option<usize>,
    /// Keys after the query's own position are masked (else only the window bounds them).
    pub(super) causal: bool,
    pub(super) avx2: bool,
    /// Tiles are widened with the element type's SIMD conversion (F16C, AVX2 for int8).
    pub(super) simd_widen: bool,
    /// Tasks per item when items are split: task `k` of an item walks its `k`-th part (parts
    /// past the item's last do nothing).
    pub(super) tasks_per_item: usize,
    /// Floats per (item, part) partial state: rows x (max, sum, acc[hd]).
    pub(super) part_stride: usize,
    pub(super) out: SharedMut<'a, f32>,
    /// `[item][part]` partial states of split items.
    pub(super) partials: SharedMut<'a, f32>,
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
    /// Position of the first query.
    first_pos: usize,
    /// First and last key any query of the item sees.
    key_lo: usize,
    key_hi: usize,
}

impl Span {
    /// Parts (absolute: part `j` holds keys `j * PART_TILES * KEY_TILE..`) the item's keys touch.
    fn parts(&self) -> std::ops::Range<usize> {
        let part_keys = PART_TILES * KEY_TILE;
        self.key_lo / part_keys..self.key_hi / part_keys + 1
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
        let last_pos = first_pos + nq - 1;
        Span {
            s,
            g,
            row0: self.batch.query_start_loc[s] as usize + i0,
            nq,
            rows: nq * self.group,
            first_pos,
            key_lo: self.window_start(first_pos),
            key_hi: self.window_end(last_pos, seq_len) - 1,
        }
    }

    /// First key query position `p` sees.
    fn window_start(&self, p: usize) -> usize {
        self.window.map_or(0, |w| (p + 1).saturating_sub(w))
    }

    /// One past the last key query position `p` of a `seq_len`-key request sees.
    fn window_end(&self, p: usize, seq_len: usize) -> usize {
        if self.causal {
            return p + 1;
        }
        self.window.map_or(seq_len, |w| (p + w).min(seq_len))
    }

    /// Widens the `dst.len() / head_dim` K and V rows starting at element `at` into f32.
    fn widen_at(&self, at: usize, k_dst: &mut [f32], v_dst: &mut [f32]) {
        let n = k_dst.len();
        let (k, v) = (&self.k_cache[at..at + n], &self.v_cache[at..at + n]);
        let (ks, vs) = if T::SCALED {
            let (r, rows) = (at / self.layout.head_dim, n / self.layout.head_dim);
            (&self.scales.k[r..r + rows], &self.scales.v[r..r + rows])
        } else {
            (&[][..], &[][..])
        };
        T::widen_rows(k, ks, k_dst, self.simd_widen);
        T::widen_rows(v, vs, v_dst, self.simd_widen);
    }

    /// Runs work item `item` whole: its parts in order, combined, then written to `out`.
    pub(super) fn run_item(&self, item: usize) {
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
    pub(super) fn run_part(&self, item: usize, k: usize) {
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
    pub(super) fn merge_parts(&self, item: usize) {
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
        sc.scores.resize(KEY_TILE * group, 0.0);
        sc.k_tile.resize(KEY_TILE * hd, 0.0);
        sc.v_tile.resize(KEY_TILE * hd, 0.0);
        let Scratch {
            part: st,
            scores,
            k_tile,
            v_tile,
            ..
        } = sc;

        let (key_lo, key_hi) = (span.key_lo, span.key_hi);
        let seq_len = self.batch.seq_lens[span.s] as usize;
        let table = &self.batch.block_tables[span.s * self.batch.max_blocks_per_seq..];
        let tiles = (part * PART_TILES).max(key_lo / KEY_TILE)
            ..((part + 1) * PART_TILES).min(key_hi / KEY_TILE + 1);
        let tiles_end = tiles.end;
        for tile in tiles {
            // Keys this item needs from the tile: [t_lo, t_hi).
            let t_lo = (tile * KEY_TILE).max(key_lo);
            let t_hi = ((tile + 1) * KEY_TILE).min(key_hi + 1);
            let n = (t_hi - t_lo) * hd;
            let in_block = t_lo / bs == (t_hi - 1) / bs;
            let base = ((table[t_lo / bs] as usize * nkv + span.g) * bs + t_lo % bs) * hd;
            // Blocks are scattered, so the hardware prefetcher starts every tile cold; ask for
            // the next tile's keys and values while this one is computed.
            #[cfg(target_arch = "x86_64")]
            if tile + 1 < tiles_end {
                let next = (tile + 1) * KEY_TILE;
                let len = (KEY_TILE.min(key_hi + 1 - next)).min(bs - next % bs) * hd;
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
                        self.widen_at(base, &mut k_tile[..n], &mut v_tile[..n]);
                        (&k_tile[..n], &v_tile[..n])
                    }
                }
            } else {
                for (i, pos) in (t_lo..t_hi).enumerate() {
                    let at = ((table[pos / bs] as usize * nkv + span.g) * bs + pos % bs) * hd;
                    self.widen_at(at, &mut k_tile[i * hd..][..hd], &mut v_tile[i * hd..][..hd]);
                }
                (&k_tile[..n], &v_tile[..n])
            };
            for qi in 0..span.nq {
                let p = span.first_pos + qi;
                let lo = self.window_start(p).max(t_lo);
                let hi = self.window_end(p, seq_len).min(t_hi);
                if lo >= hi {
                    continue;
                }
                let (k_rows, v_rows) = (
                    &k_run[(lo - t_lo) * hd..(hi - t_lo) * hd],
                    &v_run[(lo - t_lo) * hd..(hi - t_lo) * hd],
                );
                // The group's heads are adjacent in q and their state rows adjacent in `st`.
                let r0 = qi * group;
                let q_rows = &self.q[((span.row0 + qi) * self.n_heads + span.g * group) * hd..]
                    [..group * hd];
                self.update_rows(
                    q_rows,
                    k_rows,
                    v_rows,
                    &mut scores[..group * (hi - lo)],
                    &mut st.max[r0..r0 + group],
                    &mut st.sum[r0..r0 + group],
                    &mut st.acc[r0 * hd..(r0 + group) * hd],
                );
            }
        }
    }

    /// Folds keys `k_rows` (n x hd) into the online softmax of each of the `max.len()` rows of
    /// `q_rows` (one GQA group at one position): scores (`rows x n`), new running max, rescale
    /// of the old sum and accumulator, then `acc += sum_k exp(s_k - m) v_k`. Each row's result
    /// does not depend on the other rows.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn update_rows(
        &self,
        q_rows: &[f32],
        k_rows: &[f32],
        v_rows: &[f32],
        scores: &mut [f32],
        max: &mut [f32],
        sum: &mut [f32],
        acc: &mut [f32],
    ) {
        #[cfg(target_arch = "x86_64")]
        if self.avx2 {
            // SAFETY: `avx2` is only set after run-time detection and when head_dim % 8 == 0;
            // slice lengths are n * head_dim for k/v rows, rows x head_dim for q and acc,
            // rows x n for scores.
            unsafe { avx2::update_rows(q_rows, k_rows, v_rows, self.scale, scores, max, sum, acc) };
            return;
        }
        let hd = self.layout.head_dim;
        let n = k_rows.len() / hd.max(1);
        if n == 0 {
            return; // no keys to fold
        }
        let rows = q_rows
            .chunks_exact(hd)
            .zip(scores.chunks_exact_mut(n))
            .zip(max.iter_mut().zip(sum.iter_mut()))
            .zip(acc.chunks_exact_mut(hd));
        for (((q_row, scores), (max, sum)), acc) in rows {
            scalar_update_row(q_row, k_rows, v_rows, self.scale, scores, max, sum, acc);
        }
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
