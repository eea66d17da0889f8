//! Bidirectional attention over whole packed sequences (the encoders): no paged KV, nothing
//! kept after the call. Per (sequence, kv head) the keys are packed into 16-key k-major panels
//! and the values into 16-column panels, then per block of queries and head `S = Q.K^T` and
//! `O = P.V` run on the f32 GEMM's register tiles (`gemm/tile.rs`), a row softmax between them.
//!
//! A row's float operations depend only on its sequence and its position: query blocks are
//! fixed runs of [`QB`] rows from the sequence's start, each tile sums in k order whatever rows
//! share it, and a task packs the same panels however the work is split, so a sequence's output
//! is the same bits alone or in any batch, on any thread count.

use std::cell::RefCell;

use crate::cpu::{SimdLevel, simd_level};
use crate::gemm::tile::{self, MR, TileFn};
use crate::gemm::{NR, OutPtr};
use crate::ops::use_avx2;
use crate::parallel;

/// Query rows per block: 8 tiles of 6 rows; the block's scores (`QB` x keys) stay in L2 up to
/// ~1500 keys.
const QB: usize = 48;
/// Tasks per thread wanted, so uneven sequences balance over the threads.
const TASKS_PER_THREAD: usize = 4;

/// The heads of one call: `n_heads` query heads over `n_kv_heads` key/value heads (grouped
/// query attention when fewer), each `head_dim` wide.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Heads {
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
}

/// [`bidirectional_attention_at`] on this CPU's best level.
#[allow(clippy::too_many_arguments)]
pub fn bidirectional_attention(
    seq_starts: &[usize],
    heads: Heads,
    scale: f32,
    window: Option<u32>,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    out: &mut [f32],
) {
    bidirectional_attention_at(simd_level(), seq_starts, heads, scale, window, q, k, v, out);
}

/// `out[t][n_heads * head_dim]`: each sequence's queries `q` (`[t][n_heads * head_dim]`)
/// attending to its own keys `k` and values `v` (`[t][n_kv_heads * head_dim]`), with
/// `softmax(scale * q.k)`; all of its keys, or with `window` those with `|i - j| < window`.
/// Sequence `s` is rows `seq_starts[s]..seq_starts[s + 1]`.
///
/// # Panics
/// If the slices do not match the heads and `seq_starts` (not increasing from 0 to the rows of
/// `q`), or the heads do not group evenly: caller bugs, the shapes come from the model.
#[allow(clippy::too_many_arguments)]
pub fn bidirectional_attention_at(
    level: SimdLevel,
    seq_starts: &[usize],
    heads: Heads,
    scale: f32,
    window: Option<u32>,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    out: &mut [f32],
) {
    let Heads {
        n_heads,
        n_kv_heads,
        head_dim: hd,
    } = heads;
    assert!(
        n_kv_heads > 0 && n_heads % n_kv_heads == 0 && hd > 0,
        "{n_heads} heads over {n_kv_heads} kv heads of {hd}"
    );
    let t = seq_starts.last().copied().unwrap_or(0);
    assert!(
        seq_starts.first().is_none_or(|&s| s == 0) && seq_starts.is_sorted(),
        "sequence starts {seq_starts:?}"
    );
    assert_eq!(q.len(), t * n_heads * hd, "queries of {t} rows");
    assert_eq!(k.len(), t * n_kv_heads * hd, "keys of {t} rows");
    assert_eq!(v.len(), t * n_kv_heads * hd, "values of {t} rows");
    assert_eq!(out.len(), t * n_heads * hd, "output of {t} rows");
    let tiles: &[TileFn; MR] = match level {
        #[cfg(target_arch = "x86_64")]
        SimdLevel::Avx2 if use_avx2(level) => &tile::AVX2,
        _ => &tile::SCALAR,
    };
    let seqs = seq_starts.len().saturating_sub(1);
    let items = seqs * n_kv_heads;
    if items == 0 {
        return;
    }
    // An item (sequence, kv head) runs whole unless there are too few of them for the threads;
    // then its query blocks are split into runs (each run packs the item's panels again).
    let want = parallel::num_threads().max(1) * TASKS_PER_THREAD;
    let runs = want.div_ceil(items);
    let mut tasks = Vec::with_capacity(items * runs);
    for s in 0..seqs {
        let blocks = (seq_starts[s + 1] - seq_starts[s]).div_ceil(QB);
        let per_run = blocks.div_ceil(runs).max(1);
        for g in 0..n_kv_heads {
            for b0 in (0..blocks).step_by(per_run) {
                tasks.push((s, g, b0, (b0 + per_run).min(blocks)));
            }
        }
    }
    let call = Call {
        tiles,
        level,
        heads,
        scale,
        // A query always sees itself, even under a window of 0.
        window: window.map(|w| (w as usize).max(1)),
        q,
        k,
        v,
        out: OutPtr(out.as_mut_ptr()),
    };
    parallel::run(tasks.len(), &|i| {
        let (s, g, b0, b1) = tasks[i];
        SCRATCH.with_borrow_mut(|scratch| {
            call.item(scratch, seq_starts[s], seq_starts[s + 1], g, b0..b1)
        });
    });
}

/// A task's buffers: 32-byte aligned for the tiles' panel loads.
#[derive(Default)]
struct Scratch {
    k_panels: Vec<Lanes>,
    v_panels: Vec<Lanes>,
    scores: Vec<f32>,
    inv_sums: Vec<f32>,
}

#[derive(Clone, Copy, Default)]
#[repr(C, align(32))]
struct Lanes([f32; 8]);

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// `buf` grown to `n` floats (a multiple of 8), as a float slice from an aligned start.
fn aligned(buf: &mut Vec<Lanes>, n: usize) -> &mut [f32] {
    buf.resize(n.div_ceil(8), Lanes::default());
    // SAFETY: `Lanes` is 8 f32 with no padding (repr(C)), so the Vec's storage is
    // `8 * len` initialised floats.
    unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr().cast::<f32>(), n) }
}

struct Call<'a> {
    tiles: &'a [TileFn; MR],
    level: SimdLevel,
    heads: Heads,
    scale: f32,
    window: Option<usize>,
    q: &'a [f32],
    k: &'a [f32],
    v: &'a [f32],
    out: OutPtr,
}

impl Call<'_> {
    /// Query blocks `blocks` of rows `start..end`, every head of kv head `g`.
    fn item(
        &self,
        sc: &mut Scratch,
        start: usize,
        end: usize,
        g: usize,
        blocks: std::ops::Range<usize>,
    ) {
        let Heads {
            n_heads,
            n_kv_heads,
            head_dim: hd,
        } = self.heads;
        let (len, kvs) = (end - start, n_kv_heads * hd);
        let lp = len.div_ceil(NR) * NR;
        let col_panels = hd.div_ceil(NR);
        // K panel p: [hd][NR] keys p * NR.. (zero past the sequence); V panel c: [len][NR]
        // columns c * NR.. of the head (zero past head_dim).
        let kp = aligned(&mut sc.k_panels, lp * hd);
        kp.fill(0.0);
        for j in 0..len {
            let row = &self.k[(start + j) * kvs + g * hd..][..hd];
            let panel = &mut kp[(j / NR) * hd * NR + j % NR..];
            for (d, &x) in row.iter().enumerate() {
                panel[d * NR] = x;
            }
        }
        // Past head_dim a partial V panel holds stale values: they reach only `edge` columns
        // that are never written out.
        let vp = aligned(&mut sc.v_panels, col_panels * len * NR);
        for j in 0..len {
            let row = &self.v[(start + j) * kvs + g * hd..][..hd];
            for (c, chunk) in row.chunks(NR).enumerate() {
                vp[(c * len + j) * NR..][..chunk.len()].copy_from_slice(chunk);
            }
        }
        sc.scores.resize(QB * lp, 0.0);
        sc.inv_sums.resize(QB, 0.0);
        let group = n_heads / n_kv_heads;
        for b in blocks {
            let (r0, r1) = (b * QB, ((b + 1) * QB).min(len));
            // Keys any row of the block sees, from a whole panel on.
            let (klo, khi) = match self.window {
                Some(w) => (
                    r0.saturating_sub(w.saturating_sub(1)),
                    (r1 + w - 1).min(len),
                ),
                None => (0, len),
            };
            let (p0, p1) = (klo / NR, khi.div_ceil(NR));
            let k0 = p0 * NR;
            for h in g * group..(g + 1) * group {
                self.scores(kp, &mut sc.scores, start, h, r0..r1, p0..p1, lp);
                for r in r0..r1 {
                    let (lo, hi) = match self.window {
                        Some(w) => (r.saturating_sub(w - 1).max(klo), (r + w).min(khi)),
                        None => (0, len),
                    };
                    let row = &mut sc.scores[(r - r0) * lp..][..khi - k0];
                    sc.inv_sums[r - r0] =
                        softmax_unnormalized(self.level, row, lo - k0, hi - k0, self.scale);
                }
                self.values(
                    vp,
                    &sc.scores,
                    &sc.inv_sums,
                    start,
                    len,
                    h,
                    r0..r1,
                    k0..khi,
                    lp,
                );
            }
        }
    }

    /// `scores[r - r0][p * NR - k0 ..]` = q_r . k_j for the rows and key panels, head `h`.
    #[allow(clippy::too_many_arguments)]
    fn scores(
        &self,
        kp: &[f32],
        scores: &mut [f32],
        start: usize,
        h: usize,
        rows: std::ops::Range<usize>,
        panels: std::ops::Range<usize>,
        lp: usize,
    ) {
        let hd = self.heads.head_dim;
        let qs = self.heads.n_heads * hd;
        let k0 = panels.start * NR;
        let mut i = rows.start;
        while i < rows.end {
            let mr = MR.min(rows.end - i);
            let a = self.q[(start + i) * qs + h * hd..].as_ptr();
            for p in panels.clone() {
                // SAFETY: the tiles run on this CPU (level checked by the caller); rows
                // i..i + mr of q hold hd values of head h at stride qs; panel p holds hd x NR
                // values from a 32-byte aligned offset (p * hd * NR floats of an aligned
                // buffer); the scores rows (i - r0..) at stride lp have room for columns
                // p * NR - k0 + NR <= lp.
                unsafe {
                    let b = kp.as_ptr().add(p * hd * NR);
                    let c = scores.as_mut_ptr().add((i - rows.start) * lp + p * NR - k0);
                    (self.tiles[mr - 1])(a, qs, b, hd, c, lp, false);
                }
            }
            i += mr;
        }
    }

    /// `out[r][h]` = the row's probabilities (unnormalised, times `inv_sums`) . the values of
    /// keys `keys`.
    #[allow(clippy::too_many_arguments)]
    fn values(
        &self,
        vp: &[f32],
        probs: &[f32],
        inv_sums: &[f32],
        start: usize,
        len: usize,
        h: usize,
        rows: std::ops::Range<usize>,
        keys: std::ops::Range<usize>,
        lp: usize,
    ) {
        let hd = self.heads.head_dim;
        let os = self.heads.n_heads * hd;
        let kc = keys.end - keys.start;
        let mut edge = [0f32; MR * NR];
        let mut i = rows.start;
        while i < rows.end {
            let mr = MR.min(rows.end - i);
            let a = probs[(i - rows.start) * lp..].as_ptr();
            for c in 0..hd.div_ceil(NR) {
                let cols = NR.min(hd - c * NR);
                // SAFETY: as in `scores`: the probability rows hold kc values from the block's
                // first key panel; V panel c holds len x NR values, 32-byte aligned at every
                // key (NR floats a key); a full panel's outputs are columns h * hd + c * NR..+NR
                // of rows start + i.. of `out` (this task's rows and head only), a partial
                // one goes through `edge`.
                unsafe {
                    let b = vp.as_ptr().add((c * len + keys.start) * NR);
                    let o = self.out.at((start + i) * os + h * hd + c * NR);
                    if cols == NR {
                        (self.tiles[mr - 1])(a, lp, b, kc, o, os, false);
                    } else {
                        (self.tiles[mr - 1])(a, lp, b, kc, edge.as_mut_ptr(), NR, false);
                        for r in 0..mr {
                            for j in 0..cols {
                                *o.add(r * os + j) = edge[r * NR + j];
                            }
                        }
                    }
                }
            }
            for r in 0..mr {
                let inv = inv_sums[i - rows.start + r];
                // SAFETY: row start + i + r's head h, written above by this task.
                let row = unsafe {
                    std::slice::from_raw_parts_mut(self.out.at((start + i + r) * os + h * hd), hd)
                };
                row.iter_mut().for_each(|x| *x *= inv);
            }
            i += mr;
        }
    }
}

/// `row[lo..hi] = exp(scale * (row - max))`, zero elsewhere; returns 1 / their sum.
fn softmax_unnormalized(
    level: SimdLevel,
    row: &mut [f32],
    lo: usize,
    hi: usize,
    scale: f32,
) -> f32 {
    row[..lo].fill(0.0);
    row[hi..].fill(0.0);
    let live = &mut row[lo..hi];
    #[cfg(target_arch = "x86_64")]
    if use_avx2(level) {
        // SAFETY: AVX2+FMA checked.
        return unsafe { avx2::softmax_unnormalized(live, scale) };
    }
    let _ = level;
    let max = live.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0f32;
    for x in live.iter_mut() {
        *x = ((*x - max) * scale).exp();
        sum += *x;
    }
    1.0 / sum
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use crate::ops::math::{exp256, hmax256, hsum256};

    /// The AVX2 body of `softmax_unnormalized` over the live keys (at least one).
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn softmax_unnormalized(x: &mut [f32], scale: f32) -> f32 {
        let n = x.len();
        let body = n / 8 * 8;
        let p = x.as_mut_ptr();
        let mut mv = _mm256_set1_ps(f32::NEG_INFINITY);
        let mut i = 0;
        while i < body {
            // SAFETY: i + 8 <= body <= n.
            mv = _mm256_max_ps(mv, unsafe { _mm256_loadu_ps(p.add(i)) });
            i += 8;
        }
        let max = x[body..].iter().copied().fold(hmax256(mv), f32::max);
        let (sv, msv) = (_mm256_set1_ps(scale), _mm256_set1_ps(max * scale));
        let mut sum = _mm256_setzero_ps();
        i = 0;
        while i < body {
            // SAFETY: i + 8 <= body <= n.
            unsafe {
                let e = exp256(_mm256_fmsub_ps(_mm256_loadu_ps(p.add(i)), sv, msv));
                _mm256_storeu_ps(p.add(i), e);
                sum = _mm256_add_ps(sum, e);
            }
            i += 8;
        }
        let mut total = hsum256(sum);
        for v in &mut x[body..] {
            *v = v.mul_add(scale, -max * scale).exp();
            total += *v;
        }
        1.0 / total
    }
}
