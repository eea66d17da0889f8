//! Paged attention against a naive dense f64 attention: shuffled non-contiguous block tables,
//! mixed batches (decode, whole prefill, chunks starting mid-sequence), GQA ratios 1/3/4,
//! head_dim 64 and 256, with and without a sliding window, on every SIMD level; and bitwise
//! agreement across block sizes, between f16 (or int8) arenas and f32 arenas holding the same
//! values, and of a request alone and in a busy batch (f32 and int8); the bidirectional mask
//! (encoders) against the same reference, with and without a window.
#![allow(clippy::unwrap_used)] // tests may unwrap

use half::f16;
use pagoda_kernels::attention::{
    AttnBatch, KvElement, KvLayout, KvScales, KvScalesMut, Mask, dequantize_rows, paged_attention,
    paged_attention_masked_with, paged_attention_with, quantize_row, write_kv,
};
use pagoda_kernels::cpu::available_levels;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{RngExt, SeedableRng};

/// One request's full context (dense) and its new queries.
struct Request {
    seq_len: usize,
    q_len: usize,
    /// `[seq_len][nkv * hd]`
    k: Vec<f32>,
    v: Vec<f32>,
    /// `[q_len][n_heads * hd]`
    q: Vec<f32>,
}

fn random_vec(rng: &mut StdRng, n: usize, amp: f32) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-amp..amp)).collect()
}

/// Dense reference: softmax over allowed keys, in f64.
fn dense_attention(
    r: &Request,
    n_heads: usize,
    nkv: usize,
    hd: usize,
    scale: f32,
    window: Option<u32>,
) -> Vec<f32> {
    dense_attention_masked(r, n_heads, nkv, hd, scale, Mask::Causal { window })
}

/// [`dense_attention`] with the keys each query sees chosen by `mask`.
fn dense_attention_masked(
    r: &Request,
    n_heads: usize,
    nkv: usize,
    hd: usize,
    scale: f32,
    mask: Mask,
) -> Vec<f32> {
    let group = n_heads / nkv;
    let mut out = vec![0.0f32; r.q_len * n_heads * hd];
    for i in 0..r.q_len {
        let p = r.seq_len - r.q_len + i;
        for h in 0..n_heads {
            let g = h / group;
            let q = &r.q[(i * n_heads + h) * hd..][..hd];
            let keys: Vec<usize> = match mask {
                Mask::Causal { window } => (0..=p)
                    .filter(|&pk| window.is_none_or(|w| p - pk < w as usize))
                    .collect(),
                Mask::Bidirectional { window } => (0..r.seq_len)
                    .filter(|&pk| window.is_none_or(|w| p.abs_diff(pk) < w as usize))
                    .collect(),
            };
            let scores: Vec<f64> = keys
                .iter()
                .map(|&pk| {
                    let k = &r.k[(pk * nkv + g) * hd..][..hd];
                    q.iter()
                        .zip(k)
                        .map(|(&a, &b)| f64::from(a) * f64::from(b))
                        .sum::<f64>()
                        * f64::from(scale)
                })
                .collect();
            let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let denom: f64 = scores.iter().map(|s| (s - m).exp()).sum();
            let o = &mut out[(i * n_heads + h) * hd..][..hd];
            for (&pk, s) in keys.iter().zip(&scores) {
                let w = (s - m).exp() / denom;
                let v = &r.v[(pk * nkv + g) * hd..][..hd];
                for (a, &b) in o.iter_mut().zip(v) {
                    *a = (f64::from(*a) + w * f64::from(b)) as f32;
                }
            }
        }
    }
    out
}

struct Case {
    n_heads: usize,
    nkv: usize,
    hd: usize,
    block_size: usize,
    /// (seq_len, q_len) per request.
    shapes: Vec<(usize, usize)>,
    window: Option<u32>,
}

fn run_case(case: &Case, seed: u64) {
    run_case_masked(
        case,
        Mask::Causal {
            window: case.window,
        },
        seed,
    );
}

/// [`run_case`] with `mask` in place of the case's causal window.
fn run_case_masked(case: &Case, mask: Mask, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let Case {
        n_heads,
        nkv,
        hd,
        block_size: bs,
        window,
        ..
    } = *case;
    let scale = 1.0 / (hd as f32).sqrt();
    let requests: Vec<Request> = case
        .shapes
        .iter()
        .map(|&(seq_len, q_len)| Request {
            seq_len,
            q_len,
            k: random_vec(&mut rng, seq_len * nkv * hd, 1.0),
            v: random_vec(&mut rng, seq_len * nkv * hd, 1.0),
            // Larger queries make the softmax peaky, so the running max really moves.
            q: random_vec(&mut rng, q_len * n_heads * hd, 3.0),
        })
        .collect();

    // Shuffled, non-contiguous block ids (plus spare blocks nobody uses).
    let max_blocks_per_seq = requests
        .iter()
        .map(|r| r.seq_len.div_ceil(bs))
        .max()
        .unwrap_or(0)
        + 1;
    let needed: usize = requests.iter().map(|r| r.seq_len.div_ceil(bs)).sum();
    let num_blocks = needed + 7;
    let mut ids: Vec<u32> = (0..num_blocks as u32).collect();
    ids.shuffle(&mut rng);
    let mut block_tables = vec![u32::MAX; requests.len() * max_blocks_per_seq];
    let mut next = ids.into_iter();
    for (s, r) in requests.iter().enumerate() {
        for j in 0..r.seq_len.div_ceil(bs) {
            block_tables[s * max_blocks_per_seq + j] = next.next().unwrap();
        }
    }

    let layout = KvLayout {
        num_blocks,
        block_size: bs,
        num_kv_heads: nkv,
        head_dim: hd,
    };
    let mut k_cache = vec![f32::NAN; layout.arena_len()];
    let mut v_cache = vec![f32::NAN; layout.arena_len()];
    for (s, r) in requests.iter().enumerate() {
        let slots: Vec<u32> = (0..r.seq_len)
            .map(|p| block_tables[s * max_blocks_per_seq + p / bs] * bs as u32 + (p % bs) as u32)
            .collect();
        // Write in two steps like a real run: the cached prefix, then this step's tokens.
        let cached = r.seq_len - r.q_len;
        let row = nkv * hd;
        write_kv(
            &layout,
            &mut k_cache,
            &mut v_cache,
            KvScalesMut::none(),
            &slots[..cached],
            &r.k[..cached * row],
            &r.v[..cached * row],
        );
        write_kv(
            &layout,
            &mut k_cache,
            &mut v_cache,
            KvScalesMut::none(),
            &slots[cached..],
            &r.k[cached * row..],
            &r.v[cached * row..],
        );
    }

    let mut query_start_loc = vec![0u32];
    for r in &requests {
        query_start_loc.push(query_start_loc.last().unwrap() + r.q_len as u32);
    }
    let seq_lens: Vec<u32> = requests.iter().map(|r| r.seq_len as u32).collect();
    let q: Vec<f32> = requests.iter().flat_map(|r| r.q.iter().copied()).collect();
    let want: Vec<f32> = requests
        .iter()
        .flat_map(|r| dense_attention_masked(r, n_heads, nkv, hd, scale, mask))
        .collect();
    let batch = AttnBatch {
        query_start_loc: &query_start_loc,
        seq_lens: &seq_lens,
        block_tables: &block_tables,
        max_blocks_per_seq,
    };

    for level in available_levels() {
        let mut out = vec![f32::NAN; q.len()];
        paged_attention_masked_with(
            level,
            &layout,
            &k_cache,
            &v_cache,
            KvScales::NONE,
            &batch,
            &q,
            n_heads,
            scale,
            mask,
            &mut out,
        );
        for (i, (&g, &w)) in out.iter().zip(&want).enumerate() {
            assert!(
                (g - w).abs() <= 2e-5 + 1e-4 * w.abs(),
                "{level:?} heads {n_heads}/{nkv} hd {hd} bs {bs} {mask:?}: out[{i}] = {g}, want {w}"
            );
        }
    }
    if !matches!(mask, Mask::Causal { .. }) {
        return;
    }
    let mut out = vec![0.0; q.len()];
    paged_attention(
        &layout,
        &k_cache,
        &v_cache,
        KvScales::NONE,
        &batch,
        &q,
        n_heads,
        scale,
        window,
        &mut out,
    );
    assert!(out.iter().all(|v| v.is_finite()));
}

/// Decode, whole prefill, chunk starting mid-sequence (not block aligned), a long chunk.
fn mixed_shapes() -> Vec<(usize, usize)> {
    vec![(37, 1), (50, 50), (100, 23), (1, 1), (70, 40), (129, 1)]
}

#[test]
fn matches_dense_for_gqa_1_3_4_and_head_dims_64_256() {
    let heads = [
        (4, 4, 64),
        (9, 3, 64),
        (8, 2, 64),
        (4, 1, 256),
        (6, 2, 256),
        (3, 3, 256),
    ];
    for (seed, &(n_heads, nkv, hd)) in heads.iter().enumerate() {
        for window in [None, Some(20), Some(64)] {
            let case = Case {
                n_heads,
                nkv,
                hd,
                block_size: 16,
                shapes: mixed_shapes(),
                window,
            };
            run_case(&case, seed as u64);
        }
    }
}

/// Encoders: every query of a whole sequence sees keys on both sides, within `|p - p'| < W`
/// when windowed (EmbeddingGemma's sliding layers: W = 257), across parts and blocks.
#[test]
fn bidirectional_matches_dense_with_and_without_a_window() {
    for (n_heads, nkv, hd, bs) in [(3, 1, 256, 16), (4, 4, 64, 16), (6, 2, 64, 5)] {
        for window in [None, Some(20), Some(257)] {
            let case = Case {
                n_heads,
                nkv,
                hd,
                block_size: bs,
                shapes: vec![(1, 1), (37, 37), (300, 300), (129, 129)],
                window,
            };
            let seed = 7 + hd as u64 + window.unwrap_or(0) as u64;
            run_case_masked(&case, Mask::Bidirectional { window }, seed);
        }
    }
}

#[test]
fn odd_block_sizes_and_head_dims() {
    for (bs, hd, window) in [
        (1, 64, None),
        (5, 64, Some(7)),
        (32, 64, None),
        (16, 20, Some(9)),
        (3, 12, None),
    ] {
        let case = Case {
            n_heads: 6,
            nkv: 2,
            hd,
            block_size: bs,
            shapes: mixed_shapes(),
            window,
        };
        run_case(&case, 100 + bs as u64);
    }
}

#[test]
fn long_prefill_many_work_items() {
    let case = Case {
        n_heads: 9,
        nkv: 3,
        hd: 64,
        block_size: 16,
        shapes: vec![(300, 300), (400, 100), (513, 1)],
        window: None,
    };
    run_case(&case, 7);
    let case = Case {
        n_heads: 4,
        nkv: 1,
        hd: 256,
        block_size: 16,
        shapes: vec![(600, 600), (700, 1)],
        window: Some(512),
    };
    run_case(&case, 8);
}

/// A lone decode or short chunk leaves the pool idle unless keys are split across threads;
/// these shapes exercise the split and its merge (including parts a window leaves empty).
#[test]
fn single_item_batches_split_keys_across_threads() {
    for (n_heads, nkv, hd, shapes, window) in [
        (4, 1, 256, vec![(700, 1)], None),
        (4, 1, 256, vec![(1000, 1)], Some(512)),
        (9, 3, 64, vec![(2000, 1)], None),
        (4, 1, 64, vec![(300, 3)], Some(100)),
        (2, 2, 64, vec![(520, 5)], Some(3)),
    ] {
        let case = Case {
            n_heads,
            nkv,
            hd,
            block_size: 16,
            shapes,
            window,
        };
        run_case(&case, 11);
    }
}

#[test]
fn write_kv_places_tokens_at_their_slots() {
    let layout = KvLayout {
        num_blocks: 4,
        block_size: 2,
        num_kv_heads: 2,
        head_dim: 3,
    };
    let mut kc = vec![0.0; layout.arena_len()];
    let mut vc = vec![0.0; layout.arena_len()];
    let k: Vec<f32> = (0..12).map(|i| i as f32).collect();
    let v: Vec<f32> = (0..12).map(|i| -(i as f32)).collect();
    // token 0 -> block 3 offset 1; token 1 -> block 0 offset 0
    write_kv(
        &layout,
        &mut kc,
        &mut vc,
        KvScalesMut::none(),
        &[7, 0],
        &k,
        &v,
    );
    for (t, slot) in [(0usize, 7usize), (1, 0)] {
        let (b, o) = (slot / 2, slot % 2);
        for h in 0..2 {
            let at = ((b * 2 + h) * 2 + o) * 3;
            assert_eq!(&kc[at..at + 3], &k[(t * 2 + h) * 3..][..3]);
            assert_eq!(&vc[at..at + 3], &v[(t * 2 + h) * 3..][..3]);
        }
    }
    assert_eq!(
        kc.iter().filter(|&&x| x != 0.0).count(),
        11,
        "only the two tokens' values written"
    );
}

/// Runs one request (`seq_len` context, last `q_len` tokens as queries) through the paged kernel
/// with blocks of `bs`, laid out in a scrambled order; returns `[q_len][n_heads * hd]`.
#[allow(clippy::too_many_arguments)]
fn paged_one_request(
    level: pagoda_kernels::cpu::SimdLevel,
    r: &Request,
    n_heads: usize,
    nkv: usize,
    hd: usize,
    bs: usize,
    scale: f32,
    window: Option<u32>,
) -> Vec<f32> {
    paged_one_request_in::<f32>(level, r, n_heads, nkv, hd, bs, scale, window, f32::NAN)
}

/// [`paged_one_request`] with arenas of `T`, initialised to `fill`.
#[allow(clippy::too_many_arguments)]
fn paged_one_request_in<T: KvElement>(
    level: pagoda_kernels::cpu::SimdLevel,
    r: &Request,
    n_heads: usize,
    nkv: usize,
    hd: usize,
    bs: usize,
    scale: f32,
    window: Option<u32>,
    fill: T,
) -> Vec<f32> {
    let blocks = r.seq_len.div_ceil(bs);
    let num_blocks = blocks * 2 + 1;
    let mut ids: Vec<u32> = (0..num_blocks as u32).collect();
    ids.shuffle(&mut StdRng::seed_from_u64(bs as u64));
    let block_table = &ids[..blocks];
    let layout = KvLayout {
        num_blocks,
        block_size: bs,
        num_kv_heads: nkv,
        head_dim: hd,
    };
    let mut k_cache = vec![fill; layout.arena_len()];
    let mut v_cache = vec![fill; layout.arena_len()];
    let (mut ks, mut vs) = scales_for::<T>(&layout);
    let slots: Vec<u32> = (0..r.seq_len)
        .map(|p| block_table[p / bs] * bs as u32 + (p % bs) as u32)
        .collect();
    let scales = KvScalesMut {
        k: &mut ks,
        v: &mut vs,
    };
    write_kv(
        &layout,
        &mut k_cache,
        &mut v_cache,
        scales,
        &slots,
        &r.k,
        &r.v,
    );
    let query_start_loc = [0, r.q_len as u32];
    let seq_lens = [r.seq_len as u32];
    let batch = AttnBatch {
        query_start_loc: &query_start_loc,
        seq_lens: &seq_lens,
        block_tables: block_table,
        max_blocks_per_seq: blocks,
    };
    let mut out = vec![f32::NAN; r.q.len()];
    let scales = KvScales { k: &ks, v: &vs };
    paged_attention_with(
        level, &layout, &k_cache, &v_cache, scales, &batch, &r.q, n_heads, scale, window, &mut out,
    );
    out
}

/// Scale arenas for `T` (NaN, so a scale never written shows), empty for an unscaled type.
fn scales_for<T: KvElement>(layout: &KvLayout) -> (Vec<f32>, Vec<f32>) {
    let n = if T::SCALED { layout.scales_len() } else { 0 };
    (vec![f32::NAN; n], vec![f32::NAN; n])
}

/// Gemma 3 270M's shape (head_dim 256, 4 query heads on 1 kv head, window 512 or global): the
/// block size only decides where keys live, so blocks of 1, 5, 8, 16 and 48 must give the same
/// bits (the model amplifies last-bit differences into large logit differences) and match the
/// dense reference, for decodes (split across threads past 256 keys) and prefill chunks.
#[test]
fn block_sizes_agree_for_gemma3_shapes() {
    let (n_heads, nkv, hd) = (4, 1, 256);
    let scale = 1.0 / (hd as f32).sqrt();
    // (seq_len, q_len): short prompts, decodes past 128 / 512 keys, chunks mid-sequence.
    let shapes = [
        (12, 12),
        (40, 40),
        (40, 1),
        (130, 1),
        (300, 1),
        (300, 37),
        (520, 1),
        (700, 1),
        (700, 64),
    ];
    let mut rng = StdRng::seed_from_u64(21);
    for (seq_len, q_len) in shapes {
        // Gemma's normalised q/k give large, peaky scores; include a strong "sink" at 0.
        let mut k = random_vec(&mut rng, seq_len * nkv * hd, 1.0);
        k[..hd].iter_mut().for_each(|x| *x *= 8.0);
        let r = Request {
            seq_len,
            q_len,
            k,
            v: random_vec(&mut rng, seq_len * nkv * hd, 1.0),
            q: random_vec(&mut rng, q_len * n_heads * hd, 3.0),
        };
        for window in [None, Some(512)] {
            let want = dense_attention(&r, n_heads, nkv, hd, scale, window);
            for level in available_levels() {
                let base = paged_one_request(level, &r, n_heads, nkv, hd, 16, scale, window);
                for bs in [1, 5, 8, 16, 48] {
                    let got = paged_one_request(level, &r, n_heads, nkv, hd, bs, scale, window);
                    for (i, ((&g, &b), &w)) in got.iter().zip(&base).zip(&want).enumerate() {
                        let what = format!(
                            "{level:?} seq {seq_len} q {q_len} window {window:?} bs {bs}: out[{i}]"
                        );
                        assert!(
                            (g - w).abs() <= 2e-5 + 1e-4 * w.abs(),
                            "{what} = {g}, dense {w}"
                        );
                        // Bit for bit: the block size only decides where keys live.
                        assert_eq!(g.to_bits(), b.to_bits(), "{what} = {g}, bs 16 gave {b}");
                    }
                }
            }
        }
    }
}

/// An f16 arena is read as its values widened to f32: attention over it must give the same bits
/// as over an f32 arena holding the f16-rounded K and V, for every block size (straddling tiles
/// and in-block tiles take different paths), SIMD level and a split decode; writing rounds to
/// nearest even like ggml.
#[test]
fn f16_arena_matches_f32_arena_of_rounded_values() {
    let mut rng = StdRng::seed_from_u64(33);
    for (n_heads, nkv, hd, seq_len, q_len) in
        [(9, 3, 64, 150, 1), (9, 3, 64, 70, 40), (4, 1, 256, 300, 1)]
    {
        let round =
            |x: &[f32]| -> Vec<f32> { x.iter().map(|&v| f16::from_f32(v).to_f32()).collect() };
        let r = Request {
            seq_len,
            q_len,
            k: random_vec(&mut rng, seq_len * nkv * hd, 2.0),
            v: random_vec(&mut rng, seq_len * nkv * hd, 2.0),
            q: random_vec(&mut rng, q_len * n_heads * hd, 3.0),
        };
        let rounded = Request {
            seq_len,
            q_len,
            k: round(&r.k),
            v: round(&r.v),
            q: r.q.clone(),
        };
        let scale = 1.0 / (hd as f32).sqrt();
        let want = dense_attention(&r, n_heads, nkv, hd, scale, None);
        for level in available_levels() {
            for bs in [5, 16] {
                let got =
                    paged_one_request_in(level, &r, n_heads, nkv, hd, bs, scale, None, f16::NAN);
                let base = paged_one_request(level, &rounded, n_heads, nkv, hd, bs, scale, None);
                for (i, ((&g, &b), &w)) in got.iter().zip(&base).zip(&want).enumerate() {
                    assert_eq!(
                        g.to_bits(),
                        b.to_bits(),
                        "{level:?} hd {hd} bs {bs}: out[{i}] f16 {g}, f32 {b}"
                    );
                    // f16 keeps 11 significant bits: within a few 1e-3 of the exact f32 result.
                    assert!(
                        (g - w).abs() <= 5e-3 + 5e-3 * w.abs(),
                        "{level:?} hd {hd} bs {bs}: out[{i}] = {g}, dense {w}"
                    );
                }
            }
        }
    }
}

/// Runs `requests` as one batch (blocks of 16 in a shuffled arena of `E`); returns
/// `[T][n_heads * hd]`.
fn paged_batch<E: KvElement>(
    level: pagoda_kernels::cpu::SimdLevel,
    requests: &[Request],
    n_heads: usize,
    nkv: usize,
    hd: usize,
    window: Option<u32>,
) -> Vec<f32> {
    let bs = 16;
    let max_blocks_per_seq = requests
        .iter()
        .map(|r| r.seq_len.div_ceil(bs))
        .max()
        .unwrap();
    let num_blocks: usize = requests.iter().map(|r| r.seq_len.div_ceil(bs)).sum();
    let mut ids: Vec<u32> = (0..num_blocks as u32).collect();
    ids.shuffle(&mut StdRng::seed_from_u64(3));
    let layout = KvLayout {
        num_blocks,
        block_size: bs,
        num_kv_heads: nkv,
        head_dim: hd,
    };
    let (mut k_cache, mut v_cache) = (
        vec![E::default(); layout.arena_len()],
        vec![E::default(); layout.arena_len()],
    );
    let (mut ks, mut vs) = scales_for::<E>(&layout);
    let mut block_tables = vec![0u32; requests.len() * max_blocks_per_seq];
    let mut next = ids.into_iter();
    for (s, r) in requests.iter().enumerate() {
        let table = &mut block_tables[s * max_blocks_per_seq..][..r.seq_len.div_ceil(bs)];
        table.iter_mut().for_each(|b| *b = next.next().unwrap());
        let slots: Vec<u32> = (0..r.seq_len)
            .map(|p| table[p / bs] * bs as u32 + (p % bs) as u32)
            .collect();
        let scales = KvScalesMut {
            k: &mut ks,
            v: &mut vs,
        };
        write_kv(
            &layout,
            &mut k_cache,
            &mut v_cache,
            scales,
            &slots,
            &r.k,
            &r.v,
        );
    }
    let mut query_start_loc = vec![0u32];
    for r in requests {
        query_start_loc.push(query_start_loc.last().unwrap() + r.q_len as u32);
    }
    let seq_lens: Vec<u32> = requests.iter().map(|r| r.seq_len as u32).collect();
    let q: Vec<f32> = requests.iter().flat_map(|r| r.q.iter().copied()).collect();
    let batch = AttnBatch {
        query_start_loc: &query_start_loc,
        seq_lens: &seq_lens,
        block_tables: &block_tables,
        max_blocks_per_seq,
    };
    let mut out = vec![f32::NAN; q.len()];
    let scale = 1.0 / (hd as f32).sqrt();
    let scales = KvScales { k: &ks, v: &vs };
    paged_attention_with(
        level, &layout, &k_cache, &v_cache, scales, &batch, &q, n_heads, scale, window, &mut out,
    );
    out
}

/// A row's result depends on its own keys only: a long decode (or short chunk) alone, whose key
/// parts are spread over the threads, gives the same bits as when it shares a step with enough
/// other requests that every item runs whole on one thread.
#[test]
fn a_request_gives_the_same_bits_alone_and_in_a_busy_batch() {
    let mut rng = StdRng::seed_from_u64(44);
    for (n_heads, nkv, hd, seq_len, q_len, window) in [
        (9, 3, 64, 700, 1, None),
        (9, 3, 64, 400, 3, None),
        (4, 1, 256, 1000, 1, Some(512)),
        (4, 1, 256, 300, 8, None),
    ] {
        let mut request = |seq_len: usize, q_len: usize| Request {
            seq_len,
            q_len,
            k: random_vec(&mut rng, seq_len * nkv * hd, 1.0),
            v: random_vec(&mut rng, seq_len * nkv * hd, 1.0),
            q: random_vec(&mut rng, q_len * n_heads * hd, 3.0),
        };
        let mut requests = vec![request(seq_len, q_len)];
        requests.extend((0..12).map(|i| request(50 + 37 * i, 1 + i % 3)));
        let alone_len = q_len * n_heads * hd;
        let want = dense_attention(
            &requests[0],
            n_heads,
            nkv,
            hd,
            1.0 / (hd as f32).sqrt(),
            window,
        );
        // Both element kinds: unscaled (f32) and scaled (int8, whose scales are per row too).
        let dequantized = dequantized(&requests[0], nkv, hd);
        let want_int8 = dense_attention(
            &dequantized,
            n_heads,
            nkv,
            hd,
            1.0 / (hd as f32).sqrt(),
            window,
        );
        for level in available_levels() {
            let runs = [
                (
                    "f32",
                    paged_batch::<f32>(level, &requests[..1], n_heads, nkv, hd, window),
                    paged_batch::<f32>(level, &requests, n_heads, nkv, hd, window),
                    &want,
                ),
                (
                    "int8",
                    paged_batch::<i8>(level, &requests[..1], n_heads, nkv, hd, window),
                    paged_batch::<i8>(level, &requests, n_heads, nkv, hd, window),
                    &want_int8,
                ),
            ];
            for (dtype, alone, busy, want) in runs {
                for (i, ((&a, &b), &w)) in
                    alone.iter().zip(&busy[..alone_len]).zip(want).enumerate()
                {
                    let what =
                        format!("{dtype} {level:?} heads {n_heads}/{nkv} seq {seq_len} q {q_len}");
                    assert_eq!(
                        a.to_bits(),
                        b.to_bits(),
                        "{what}: out[{i}] alone {a}, busy {b}"
                    );
                    assert!(
                        (a - w).abs() <= 2e-5 + 1e-4 * w.abs(),
                        "{what}: out[{i}] = {a}, dense {w}"
                    );
                }
            }
        }
    }
}

/// `r` with K and V as an int8 arena stores them: each (token, kv head) row quantized and read
/// back.
fn dequantized(r: &Request, nkv: usize, hd: usize) -> Request {
    let round = |x: &[f32]| -> Vec<f32> {
        let mut out = vec![0.0; x.len()];
        let mut q = vec![0i8; hd];
        for (src, dst) in x.chunks_exact(hd).zip(out.chunks_exact_mut(hd)) {
            let scale = quantize_row(src, &mut q);
            dequantize_rows(&q, &[scale], dst, false);
        }
        out
    };
    debug_assert_eq!(r.k.len() % (nkv * hd), 0);
    Request {
        seq_len: r.seq_len,
        q_len: r.q_len,
        k: round(&r.k),
        v: round(&r.v),
        q: r.q.clone(),
    }
}

/// An int8 arena is read as its rows dequantized (`q * scale`, exact in f32, the same on every
/// SIMD level): attention over it gives the same bits as over an f32 arena holding the
/// dequantized K and V, for straddling and in-block tiles, every SIMD level and a split decode.
/// Against exact attention and against an f16 arena it stays within the bound below, which is
/// what a per-row absmax/127 step (values within +-2, queries within +-3) allows.
#[test]
fn int8_arena_matches_f32_arena_of_dequantized_values_and_f16_within_bounds() {
    let mut rng = StdRng::seed_from_u64(34);
    let mut worst = (0.0f32, 0.0f32);
    for (n_heads, nkv, hd, seq_len, q_len, window) in [
        (9, 3, 64, 150, 1, None),
        (9, 3, 64, 70, 40, None),
        (4, 1, 256, 300, 1, None),
        (4, 1, 256, 600, 3, Some(512)),
        (6, 2, 20, 90, 17, Some(9)),
    ] {
        let r = Request {
            seq_len,
            q_len,
            k: random_vec(&mut rng, seq_len * nkv * hd, 2.0),
            v: random_vec(&mut rng, seq_len * nkv * hd, 2.0),
            q: random_vec(&mut rng, q_len * n_heads * hd, 3.0),
        };
        let rounded = dequantized(&r, nkv, hd);
        let scale = 1.0 / (hd as f32).sqrt();
        let want = dense_attention(&r, n_heads, nkv, hd, scale, window);
        for level in available_levels() {
            for bs in [5, 16] {
                let got = paged_one_request_in(level, &r, n_heads, nkv, hd, bs, scale, window, 0i8);
                let base = paged_one_request(level, &rounded, n_heads, nkv, hd, bs, scale, window);
                let f16s =
                    paged_one_request_in(level, &r, n_heads, nkv, hd, bs, scale, window, f16::NAN);
                for (i, (((&g, &b), &w), &h)) in
                    got.iter().zip(&base).zip(&want).zip(&f16s).enumerate()
                {
                    let what = format!("{level:?} hd {hd} bs {bs} window {window:?}: out[{i}]");
                    assert_eq!(g.to_bits(), b.to_bits(), "{what} int8 {g}, f32 {b}");
                    assert!((g - w).abs() <= INT8_BOUND, "{what} = {g}, dense {w}");
                    assert!((g - h).abs() <= INT8_BOUND, "{what} = {g}, f16 {h}");
                    worst = (worst.0.max((g - w).abs()), worst.1.max((g - h).abs()));
                }
            }
        }
    }
    // The bound is not loose by orders of magnitude: int8 really is coarser than f16.
    assert!(
        worst.0 > INT8_BOUND / 20.0,
        "int8 error {worst:?} suspiciously small"
    );
}

/// Largest |int8 - exact| (and |int8 - f16|) of an attention output in the test above; the worst
/// seen is 0.0224 (hd 20, a window of 9 keys: few keys, a peaky softmax).
const INT8_BOUND: f32 = 3e-2;
