//! Sliding-window freeing on Gemma 3's layer pattern (a tiny Gemma 3: 5 local layers of window
//! 32, one global): after a 112-token prompt (past three windows, prefilled in three chunks so
//! the local groups free between chunks too) the global group holds a block per 16 tokens and
//! each local group at most a window plus one block; the tokens and log-probabilities are
//! bit-identical to an engine that keeps every layer's KV; a second request on the same prompt
//! hits the cache (the local groups only for the last window). The rule does not depend on the
//! weights: the real 270M's run of it (window 512, a 1,088-token prompt) took 17 CPU-seconds.
#![allow(clippy::unwrap_used)]

use crate::common;

use pagoda_core::SchedulerConfig;
use pagoda_core::kv::NULL_BLOCK;
use pagoda_model::{EngineSetup, Model, build_engine};
use pagoda_testkit::tiny_model::TinyModel;

const WINDOW: usize = 32;
// A multiple of the block size, so a second run caches all but the last block.
const PROMPT: usize = 112;
const CHUNK: usize = 48;
const _: () = assert!(PROMPT > 2 * WINDOW && PROMPT > 2 * CHUNK && PROMPT.is_multiple_of(16));

fn model() -> Model {
    common::tiny(&TinyModel {
        sliding_window: WINDOW as u32,
        ..TinyModel::gemma3()
    })
}

fn setup(freeing: bool) -> EngineSetup {
    EngineSetup {
        scheduler: SchedulerConfig {
            max_num_batched_tokens: CHUNK,
            ..Default::default()
        },
        kv_cache_memory: Some(128 << 20),
        max_model_len: Some(PROMPT + 200),
        sliding_window_freeing: freeing,
        ..EngineSetup::default()
    }
}

#[test]
fn local_layers_hold_one_window_and_outputs_do_not_change() {
    let prompt = common::prompt(PROMPT, 4, 250, 7);
    let (mut on, report) = build_engine(model(), &setup(true)).unwrap();
    assert_eq!((report.num_groups, report.num_sliding_groups), (6, 5));
    let mut seen_end_of_prompt = false;
    let first = common::run_greedy(&mut on, 0, &prompt, 4, |core| {
        let s = core.scheduler();
        let Some(&seq) = s.running().first() else {
            return;
        };
        let computed = s.request(seq).unwrap().num_computed_tokens;
        let tables = s.kv().block_tables(seq);
        let real = |t: &Vec<u32>| t.iter().filter(|&&b| b != NULL_BLOCK).count();
        let groups = s.kv().groups();
        for (g, t) in tables.iter().enumerate() {
            if groups[g].sliding_window.is_none() {
                assert_eq!(real(t), computed.div_ceil(16), "global group {g}");
            } else {
                assert!(
                    real(t) * 16 <= WINDOW + 16,
                    "local group {g}: {} blocks",
                    real(t)
                );
            }
        }
        if computed == PROMPT {
            // (global blocks for the prompt) + 5 local groups x (a window + one block).
            seen_end_of_prompt = true;
            let held = s.kv().num_held_blocks(seq);
            assert!(
                held <= PROMPT / 16 + 5 * (WINDOW / 16 + 1),
                "{held} blocks after the prompt"
            );
        }
    });
    assert!(seen_end_of_prompt);
    assert_eq!(first.tokens.len(), 4);

    // The same prompt again: served from the cache but for the last partial block.
    let again = common::run_greedy(&mut on, 1, &prompt, 4, |_| {});
    assert_eq!(again.cached, PROMPT / 16 * 16 - 16);
    assert_eq!(again.tokens, first.tokens);
    assert_eq!(again.logprobs, first.logprobs);
    drop(on);

    let (mut off, report) = build_engine(model(), &setup(false)).unwrap();
    assert_eq!(report.num_groups, 1);
    let kept = common::run_greedy(&mut off, 0, &prompt, 4, |_| {});
    assert_eq!(kept.tokens, first.tokens);
    assert_eq!(
        kept.logprobs, first.logprobs,
        "log-probabilities differ bit for bit"
    );
}
