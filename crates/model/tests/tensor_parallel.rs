//! Tensor parallelism through the whole engine on tiny random models: two ranks (threads,
//! kernels inline) give the same greedy tokens as one, with log-probabilities within float
//! noise (the all-reduce sums the heads' and FFN columns' partial products in another order),
//! and bit-identical results from run to run. Llama, Qwen2 (q/k/v biases) and Gemma 3 (one KV
//! head: replicated on both ranks); prefix caching, chunked prefill, n-gram speculation and
//! int8 KV with two ranks; the start-up errors (heads that do not divide, a split inside a
//! quant block); and a rank that panics mid-step fails its requests without a hang.
#![allow(clippy::unwrap_used)]

use crate::common;

use pagoda_core::SamplingParams;
use pagoda_model::{EngineSetup, ModelError, TensorParallelConfig, TpError, build_engine};
use pagoda_testkit::tiny_model::TinyModel;

/// Log-probabilities of two ranks against one. The all-reduce sums the partial products in
/// another order (last-bit differences), but the next matmul quantizes its activations to 8
/// bits and the KV cache stores f16, so a last-bit difference can flip one rounding step
/// (1/254 of a block's largest value): measured up to 0.035 on a logit of 4 with every matrix
/// Q8_0, 0.0025 with f32 matrices, and none on the default mix for one 20-token prompt.
const LOGPROB_TOL: f32 = 0.05;

fn base() -> EngineSetup {
    EngineSetup {
        max_model_len: Some(512),
        ..common::small_setup()
    }
}

fn setup(ranks: usize) -> EngineSetup {
    EngineSetup {
        tensor_parallel: TensorParallelConfig::new(ranks),
        ..base()
    }
}

fn requests() -> Vec<(Vec<u32>, SamplingParams)> {
    (0..4u32)
        .map(|i| {
            let mut p = SamplingParams::greedy(16);
            p.ignore_eos = true;
            p.logprobs = Some(3);
            (common::prompt(10 + 9 * i as usize, 4, 250, i), p)
        })
        .collect()
}

/// Runs the requests with one and with two ranks (twice): tokens equal to one rank's,
/// log-probabilities within float noise, and the two-rank runs identical to the bit.
fn check_matches_one_rank(
    spec: &TinyModel,
    base: EngineSetup,
    reqs: &[(Vec<u32>, SamplingParams)],
) {
    let one = common::run_engine(common::tiny(spec), &base, reqs);
    let two_setup = EngineSetup {
        tensor_parallel: TensorParallelConfig::new(2),
        ..base
    };
    let two = common::run_engine(common::tiny(spec), &two_setup, reqs);
    let again = common::run_engine(common::tiny(spec), &two_setup, reqs);
    for (i, ((a, b), c)) in one.iter().zip(&two).zip(&again).enumerate() {
        assert_eq!(
            a.token_ids, b.token_ids,
            "request {i}: tokens differ with 2 ranks"
        );
        assert!(!b.token_ids.is_empty(), "request {i}: nothing generated");
        for (pa, pb) in a.logprobs.iter().zip(&b.logprobs) {
            for (ta, tb) in pa.top.iter().zip(&pb.top) {
                assert!(
                    (ta.logprob - tb.logprob).abs() < LOGPROB_TOL,
                    "request {i}: logprob {} vs {}",
                    ta.logprob,
                    tb.logprob
                );
            }
        }
        assert_eq!(b.token_ids, c.token_ids, "request {i}: 2-rank runs differ");
        let bits = |g: &common::Generated| -> Vec<u32> {
            g.logprobs
                .iter()
                .flat_map(|p| p.top.iter().map(|t| t.logprob.to_bits()))
                .collect()
        };
        assert_eq!(
            bits(b),
            bits(c),
            "request {i}: 2-rank logprobs differ run to run"
        );
    }
}

/// Llama with 8 heads of 64, so each rank's o_proj columns (4 heads) are whole Q4_K blocks.
fn llama() -> TinyModel {
    TinyModel {
        d_model: 512,
        n_heads: 8,
        ..TinyModel::llama()
    }
}

#[test]
fn llama_two_ranks_match_one() {
    check_matches_one_rank(&llama(), base(), &requests());
}

#[test]
fn qwen2_biases_two_ranks_match_one() {
    check_matches_one_rank(&TinyModel::qwen2(), base(), &requests());
}

#[test]
fn gemma3_replicated_kv_head_two_ranks_match_one() {
    // One KV head over two ranks: each holds a copy.
    assert_eq!(TinyModel::gemma3().n_kv_heads, 1);
    check_matches_one_rank(&TinyModel::gemma3(), base(), &requests());
}

/// Tokens of `two` equal `one`'s up to a position where `one`'s two best are within
/// `2 * LOGPROB_TOL` (a near tie the summation order may break either way), and
/// log-probabilities within `LOGPROB_TOL` before it.
fn assert_close_up_to_a_tie(one: &common::Generated, two: &common::Generated, what: &str) {
    let agreed = one
        .token_ids
        .iter()
        .zip(&two.token_ids)
        .take_while(|(a, b)| a == b)
        .count();
    for (pa, pb) in one.logprobs.iter().zip(&two.logprobs).take(agreed) {
        for (ta, tb) in pa.top.iter().zip(&pb.top) {
            let d = (ta.logprob - tb.logprob).abs();
            assert!(
                d < LOGPROB_TOL,
                "{what}: logprob {} vs {}",
                ta.logprob,
                tb.logprob
            );
        }
    }
    if agreed < one.token_ids.len() {
        let top = &one.logprobs[agreed].top;
        let gap = top[0].logprob - top[1].logprob;
        assert!(
            gap < 2.0 * LOGPROB_TOL,
            "{what}: tokens differ at {agreed} where one rank's best two are {gap} apart"
        );
    }
}

/// A LoRA adapter split as the weights are (B's rows for q/k/v and gate/up, A's columns for
/// o and down, the partial products summed by the all-reduce), on llama and on Gemma 3's
/// replicated KV head, requests with and without it in one batch.
#[test]
fn lora_adapters_with_two_ranks_match_one() {
    for spec in [llama(), TinyModel::gemma3()] {
        let reqs = common::split::with_adapter(&spec, &requests()[..2]);
        let one = common::run_engine(common::tiny(&spec), &base(), &reqs);
        common::split::assert_adapter_changed_outputs(&one, LOGPROB_TOL);
        let two = common::run_engine(common::tiny(&spec), &setup(2), &reqs);
        for (i, (a, b)) in one.iter().zip(&two).enumerate() {
            assert!(!b.token_ids.is_empty(), "request {i}: nothing generated");
            assert_close_up_to_a_tie(a, b, &format!("{:?} request {i}", spec.arch));
        }
    }
}

/// A context shift with two ranks: each rank copies and re-rotates its own KV heads' blocks.
/// A 20-token prompt asked for 80 tokens in a 64-token context runs on past it, as one rank.
#[test]
fn a_context_shift_with_two_ranks_matches_one() {
    let mut one = base();
    one.max_model_len = Some(64);
    one.scheduler.context_shift_keep = Some(4);
    let mut params = SamplingParams::greedy(80);
    params.ignore_eos = true;
    params.logprobs = Some(3);
    let reqs = [(common::prompt(20, 4, 250, 7), params)];
    let two = EngineSetup {
        tensor_parallel: TensorParallelConfig::new(2),
        ..one.clone()
    };
    let a = common::run_engine(common::tiny(&llama()), &one, &reqs);
    let b = common::run_engine(common::tiny(&llama()), &two, &reqs);
    assert_eq!(
        a[0].token_ids.len(),
        80,
        "one rank stopped before the shift"
    );
    assert_eq!(
        b[0].token_ids.len(),
        80,
        "two ranks stopped before the shift"
    );
    assert_close_up_to_a_tie(&a[0], &b[0], "context shift");
}

/// Each rank's kernels on a pool of two threads (oversubscribed here: the machine has two
/// cores): the bits of one thread per rank, the pool splitting work, never sums.
#[test]
fn two_threads_per_rank_give_the_bits_of_one() {
    let reqs = requests();
    let one_each = common::run_engine(common::tiny(&llama()), &setup(2), &reqs);
    let two_each = EngineSetup {
        threads_per_rank: Some(2),
        ..setup(2)
    };
    let two_each = common::run_engine(common::tiny(&llama()), &two_each, &reqs);
    let bits = |g: &common::Generated| -> (Vec<u32>, Vec<u32>) {
        let lp = g.logprobs.iter().flat_map(|p| &p.top);
        (
            g.token_ids.clone(),
            lp.map(|t| t.logprob.to_bits()).collect(),
        )
    };
    for (i, (a, b)) in one_each.iter().zip(&two_each).enumerate() {
        assert_eq!(bits(a), bits(b), "request {i}");
    }
}

#[test]
fn engine_features_with_two_ranks() {
    // Every feature at once (common/features.rs), then proof that each ran with two ranks.
    let base = common::split::with_features(base());
    let reqs = common::split::shared_head_requests();
    check_matches_one_rank(&TinyModel::qwen2(), base.clone(), &reqs);
    let two = EngineSetup {
        tensor_parallel: TensorParallelConfig::new(2),
        ..base
    };
    let (_, stats) = common::run_engine_with_stats(common::tiny(&TinyModel::qwen2()), &two, &reqs);
    common::split::assert_features_ran(&stats);
}

/// Each of two ranks holds about half the weights (its heads, FFN columns and vocabulary rows;
/// only the norms are held by both).
#[test]
fn each_rank_holds_about_half_the_weights() {
    let one = common::tiny(&llama()).weight_bytes();
    let (core, _) = build_engine(common::tiny(&llama()), &setup(2)).unwrap();
    let layout = core.executor().executor().layout();
    assert_eq!(
        (layout.tensor_parallel_size, layout.pipeline_parallel_size),
        (2, 1)
    );
    for r in &layout.ranks {
        let share = r.weight_bytes as f64 / one as f64;
        assert!(
            (0.45..0.55).contains(&share),
            "rank {} holds {share:.3} of the weights",
            r.rank
        );
    }
}

fn start_error(spec: &TinyModel, ranks: usize) -> ModelError {
    match build_engine(common::tiny(spec), &setup(ranks)) {
        Ok(_) => panic!("{ranks} ranks should be refused"),
        Err(e) => e,
    }
}

#[test]
fn heads_that_do_not_divide_are_a_start_up_error() {
    let e = start_error(&llama(), 3);
    assert!(
        matches!(
            e,
            ModelError::TensorParallel(TpError::HeadsNotDivisible { heads: 8, size: 3 })
        ),
        "{e}"
    );
    assert!(e.to_string().contains("does not divide"), "{e}");
}

#[test]
fn a_split_inside_a_quant_block_is_a_start_up_error() {
    // 4 heads x 64: each rank's 128 o_proj columns would cut a 256-value Q4_K block.
    let e = start_error(&TinyModel::llama(), 2);
    assert!(
        matches!(
            &e,
            ModelError::TensorParallel(TpError::NotBlockAligned {
                block: 256,
                at: 128,
                ..
            })
        ),
        "{e}"
    );
}

#[test]
fn a_failed_rank_fails_its_requests_without_a_hang() {
    common::split::assert_a_failed_rank_fails_cleanly(common::tiny(&llama()), &setup(2), "rank 1");
}
