//! Mistral's sliding window on every layer (a llama GGUF declaring
//! `llama.attention.sliding_window`): a query sees exactly the last `window` tokens, the one
//! sliding group gives its old blocks back while the request runs, and the outputs match an
//! engine that keeps every block.
#![allow(clippy::unwrap_used)]

use crate::common;

use pagoda_core::SchedulerConfig;
use pagoda_core::kv::NULL_BLOCK;
use pagoda_model::{CpuExecutor, EngineSetup, KvCacheDtype, build_engine};
use pagoda_testkit::tiny_model::TinyModel;

const WINDOW: usize = 8;

/// A one-layer model: its last position's attention over `n` tokens with the window is the
/// windowless model's over the last `WINDOW` tokens (RoPE scores depend on relative positions
/// only), an independent check of which keys the window keeps.
#[test]
fn a_query_attends_to_exactly_the_last_window_tokens() {
    let windowed = TinyModel {
        n_layers: 1,
        ..TinyModel::mistral()
    };
    let plain = TinyModel {
        sliding_window: 0,
        ..windowed.clone()
    };
    assert_eq!(
        common::tiny(&windowed).config().sliding_window,
        Some(WINDOW as u32)
    );
    let tokens = common::prompt(20, 5, 250, 3);
    let vocab = windowed.vocab_size;
    let table: Vec<u32> = (0..4).collect();
    let run = |spec: &TinyModel, tokens: &[u32]| {
        // f32 KV: K rotated at other absolute positions then rounds alike.
        let mut model = common::tiny(spec);
        model.set_kv_cache_dtype(KvCacheDtype::F32);
        let mut exec = CpuExecutor::new(model, 8, 16).unwrap();
        common::logits_in_chunks(&mut exec, tokens, &[7, 13], &table)
    };
    let with = run(&windowed, &tokens);
    let without = run(&plain, &tokens);

    // Up to the window's length nothing is masked.
    let head = WINDOW * vocab;
    let (d, m) = common::max_diff(&with[..head], &without[..head]);
    assert!(d <= 1e-6 * m, "inside the window: {d} of {m}");

    let last = &with[(tokens.len() - 1) * vocab..];
    let tail = run(&plain, &tokens[tokens.len() - WINDOW..]);
    let tail_last = &tail[(WINDOW - 1) * vocab..];
    let (d, m) = common::max_diff(last, tail_last);
    // Only RoPE's rounding at other absolute angles differs.
    assert!(
        d <= 1e-3 * m,
        "last query vs the last {WINDOW} tokens alone: {d} of {m}"
    );
    let (bite, _) = common::max_diff(last, &without[(tokens.len() - 1) * vocab..]);
    assert!(
        bite > 10.0 * d,
        "the window changes the last position ({bite}) more than rounding does ({d})"
    );
}

fn setup(freeing: bool) -> EngineSetup {
    EngineSetup {
        scheduler: SchedulerConfig {
            max_num_batched_tokens: 64,
            ..Default::default()
        },
        kv_cache_memory: Some(4 << 20),
        sliding_window_freeing: freeing,
        ..EngineSetup::default()
    }
}

#[test]
fn every_layer_slides_and_gives_its_blocks_back() {
    let spec = TinyModel::mistral();
    let prompt = common::prompt(300, 5, 250, 11);
    let (mut on, report) = build_engine(common::tiny(&spec), &setup(true)).unwrap();
    assert_eq!((report.num_groups, report.num_sliding_groups), (1, 1));
    let mut most = 0;
    let first = common::run_greedy(&mut on, 0, &prompt, 6, |core| {
        let s = core.scheduler();
        let Some(&seq) = s.running().first() else {
            return;
        };
        let real = s.kv().block_tables(seq)[0]
            .iter()
            .filter(|&&b| b != NULL_BLOCK)
            .count();
        most = most.max(real);
    });
    // A chunk of 64 tokens plus the window before it: at most 6 blocks of 16, never the
    // 19 the whole sequence would take.
    assert!(most <= 6, "{most} blocks held at once");
    assert_eq!(first.tokens.len(), 6);

    // The same prompt again: the hit needs only the blocks of the last window.
    let again = common::run_greedy(&mut on, 1, &prompt, 6, |_| {});
    assert!(again.cached > 0, "no prefix hit");
    assert_eq!(again.tokens, first.tokens);
    assert_eq!(again.logprobs, first.logprobs);
    drop(on);

    let (mut off, report) = build_engine(common::tiny(&spec), &setup(false)).unwrap();
    assert_eq!(report.num_groups, 1);
    let kept = common::run_greedy(&mut off, 0, &prompt, 6, |_| {});
    assert_eq!(kept.tokens, first.tokens);
    assert_eq!(
        kept.logprobs, first.logprobs,
        "log-probabilities differ bit for bit"
    );
}
