//! The same tokens must give the same logits however they are batched: one step, chunks of
//! assorted sizes, one token at a time, mixed with other requests, across shuffled blocks and
//! block sizes. Linear layers see different row counts in each case, so agreement is within a
//! small float tolerance, not bitwise.
#![allow(clippy::unwrap_used)]

use crate::common;

use common::{logits_in_chunks, max_diff, prompt};
use pagoda_model::{CpuExecutor, ForwardBatch, Logits, Model, SeqChunk};
use pagoda_testkit::tiny_model::TinyModel;

/// Allowed logit difference, relative to the largest logit magnitude.
const REL_TOL: f32 = 2e-3;

fn assert_close(what: &str, reference: &[f32], got: &[f32]) {
    let (d, m) = max_diff(reference, got);
    eprintln!(
        "{what}: max |diff| {d:.2e} (largest logit {m:.2}, relative {:.2e})",
        d / m.max(1e-6)
    );
    assert!(
        d <= REL_TOL * m.max(1.0),
        "{what}: logits differ by {d} (largest logit {m})"
    );
}

/// Chunk sizes, block sizes and shuffled blocks on one model. `load` makes a fresh model.
fn check_chunking(name: &str, load: &dyn Fn() -> Model, n: usize) {
    check_chunking_with(name, load, n, &[16, 5]);
}

/// `check_chunking` over the given block sizes (the first gives the reference).
fn check_chunking_with(name: &str, load: &dyn Fn() -> Model, n: usize, block_sizes: &[usize]) {
    let vocab = load().config().vocab_size as u32;
    let tokens = prompt(n, 4, vocab.min(20_000), 7);
    // The reference: the whole prompt in one step with blocks of 16. Every other run (block
    // size 5 included) is compared against it.
    let mut reference = Vec::new();
    for &block_size in block_sizes {
        let blocks = n.div_ceil(block_size);
        let contiguous: Vec<u32> = (0..blocks as u32).collect();
        let mut exec = CpuExecutor::new(load(), blocks * 3, block_size).unwrap();
        let one_step = logits_in_chunks(&mut exec, &tokens, &[n], &contiguous);
        if reference.is_empty() {
            reference = one_step;
        } else {
            assert_close(
                &format!("{name} bs {block_size} one step vs bs 16"),
                &reference,
                &one_step,
            );
        }
        for chunks in [
            vec![1],
            vec![3],
            vec![7],
            vec![16],
            vec![64],
            vec![1, 3, 7, 16],
        ] {
            let got = logits_in_chunks(&mut exec, &tokens, &chunks, &contiguous);
            assert_close(
                &format!("{name} bs {block_size} chunks {chunks:?}"),
                &reference,
                &got,
            );
        }
        // Non-contiguous blocks in a scrambled order, scattered over a bigger arena.
        let shuffled: Vec<u32> = (0..blocks as u32)
            .map(|i| (i * 7 + 3) % (blocks as u32 * 3))
            .rev()
            .collect();
        let mut uniq = shuffled.clone();
        uniq.sort_unstable();
        uniq.dedup();
        assert_eq!(uniq.len(), blocks, "shuffled table must not repeat blocks");
        let got = logits_in_chunks(&mut exec, &tokens, &[7], &shuffled);
        assert_close(
            &format!("{name} bs {block_size} shuffled blocks"),
            &reference,
            &got,
        );
    }
}

/// Three requests in one batch (a prefill from 0, a decode step after a cached prefix, and a
/// middle chunk) give the same logits as each run alone.
fn check_mixed_batch(name: &str, load: &dyn Fn() -> Model) {
    let bs = 16;
    let vocab = load().config().vocab_size as u32;
    let a = prompt(21, 4, vocab.min(20_000), 1);
    let b = prompt(30, 4, vocab.min(20_000), 2);
    let c = prompt(40, 4, vocab.min(20_000), 3);
    let (ta, tb, tc): (Vec<u32>, Vec<u32>, Vec<u32>) =
        ((0..2).collect(), (2..4).collect(), vec![9, 4, 7]);

    // Alone: each request in its own executor with the same block table.
    let mut solo = Vec::new();
    for (tokens, table, cached) in [(&a, &ta, 0usize), (&b, &tb, 29), (&c, &tc, 17)] {
        let mut exec = CpuExecutor::new(load(), 10, bs).unwrap();
        if cached > 0 {
            logits_in_chunks(&mut exec, &tokens[..cached], &[cached], table);
        }
        let end = if cached == 17 { 33 } else { tokens.len() };
        let batch = ForwardBatch::from_seqs(
            &[SeqChunk {
                tokens: &tokens[cached..end],
                start: cached,
                block_tables: std::slice::from_ref(table),
                logits: Logits::All,
            }],
            bs,
        );
        solo.extend_from_slice(exec.forward(&batch).unwrap());
    }

    // Together: the cached prefixes first, then one batch with all three.
    let mut exec = CpuExecutor::new(load(), 10, bs).unwrap();
    logits_in_chunks(&mut exec, &b[..29], &[29], &tb);
    logits_in_chunks(&mut exec, &c[..17], &[17], &tc);
    let batch = ForwardBatch::from_seqs(
        &[
            SeqChunk {
                tokens: &a,
                start: 0,
                block_tables: std::slice::from_ref(&ta),
                logits: Logits::All,
            },
            SeqChunk {
                tokens: &b[29..],
                start: 29,
                block_tables: std::slice::from_ref(&tb),
                logits: Logits::All,
            },
            SeqChunk {
                tokens: &c[17..33],
                start: 17,
                block_tables: std::slice::from_ref(&tc),
                logits: Logits::All,
            },
        ],
        bs,
    );
    let together = exec.forward(&batch).unwrap().to_vec();
    assert_close(&format!("{name} mixed batch vs alone"), &solo, &together);
}

#[test]
fn tiny_llama_chunking() {
    let spec = TinyModel::llama();
    check_chunking("tiny llama", &|| common::tiny(&spec), 45);
    check_mixed_batch("tiny llama", &|| common::tiny(&spec));
}

#[test]
fn tiny_qwen3_chunking() {
    let spec = TinyModel::qwen3();
    check_chunking("tiny qwen3", &|| common::tiny(&spec), 45);
    check_mixed_batch("tiny qwen3", &|| common::tiny(&spec));
}

#[test]
fn tiny_mistral_chunking() {
    // Every layer slides (window 8 < prompt), across chunk boundaries.
    let spec = TinyModel::mistral();
    check_chunking("tiny mistral", &|| common::tiny(&spec), 45);
    check_mixed_batch("tiny mistral", &|| common::tiny(&spec));
}

#[test]
fn tiny_gemma3_chunking() {
    // Window 8 < prompt, so the sliding-window mask is exercised across chunk boundaries.
    let spec = TinyModel::gemma3();
    check_chunking("tiny gemma3", &|| common::tiny(&spec), 45);
    check_mixed_batch("tiny gemma3", &|| common::tiny(&spec));
}

/// One real model: Gemma 3 (sliding and global layers, K-quants). The llama graph's chunking
/// is the tiny llama's and tiny Qwen3's above (SmolLM2's real run of it took 10 s). Blocks of
/// 16 only: the block size is the attention's business, which the tiny models cover at 5, and
/// every run here pays the 262,144-row LM head on all 40 rows (16 CPU-s with both sizes).
#[test]
fn gemma3_chunking() {
    check_chunking_with("gemma3", &|| common::load_model(common::GEMMA3), 40, &[16]);
    check_mixed_batch("gemma3", &|| common::load_model(common::GEMMA3));
}
