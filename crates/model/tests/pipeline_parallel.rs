//! Pipeline parallelism through the whole engine on tiny random models: two stages (threads,
//! kernels inline, each holding half the layers) give the same greedy tokens and the same
//! log-probabilities to the bit as one process (a stage runs the same kernels on the same
//! rows; only where the rows are computed changes), identical run to run; a step cut into
//! micro-batches gives the logits of the whole step (and so do prefix caching, chunked prefill,
//! n-gram speculation and int8 KV); each stage holds about half the weights;
//! the start-up errors; and a stage that panics mid-step fails its requests without a hang.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use crate::common;

use pagoda_core::SamplingParams;
use pagoda_gguf::GgufFile;
use pagoda_model::{
    CpuExecutor, EngineSetup, ForwardBatch, KvGroupPlan, Logits, Model, ModelError,
    PipelineParallelConfig, PpError, SeqChunk, TensorParallelConfig, build_engine,
};
use pagoda_testkit::tiny_model::TinyModel;

fn base() -> EngineSetup {
    EngineSetup {
        max_model_len: Some(512),
        ..common::small_setup()
    }
}

fn pp(stages: usize, micro_batches: Option<usize>) -> PipelineParallelConfig {
    PipelineParallelConfig {
        micro_batches,
        ..PipelineParallelConfig::new(stages)
    }
}

fn setup(stages: usize) -> EngineSetup {
    EngineSetup {
        pipeline_parallel: pp(stages, None),
        ..base()
    }
}

fn requests() -> Vec<(Vec<u32>, SamplingParams)> {
    (0..4u32)
        .map(|i| {
            let mut p = SamplingParams::greedy(12);
            p.ignore_eos = true;
            p.logprobs = Some(3);
            (common::prompt(10 + 9 * i as usize, 4, 250, i), p)
        })
        .collect()
}

/// Tokens and log-probabilities (as bits) of every request.
fn bits(out: &[common::Generated]) -> Vec<(Vec<u32>, Vec<u32>)> {
    out.iter()
        .map(|g| {
            let lp = g.logprobs.iter().flat_map(|p| &p.top);
            (
                g.token_ids.clone(),
                lp.map(|t| t.logprob.to_bits()).collect(),
            )
        })
        .collect()
}

/// One process against two stages, twice: the same tokens and log-probability bits. The
/// first step's 94 prompt rows are cut into 5 micro-batches by the rule.
fn check_matches_one_process(spec: &TinyModel) {
    let reqs = requests();
    let one = common::run_engine(common::tiny(spec), &base(), &reqs);
    let two_setup = setup(2);
    let two = common::run_engine(common::tiny(spec), &two_setup, &reqs);
    let again = common::run_engine(common::tiny(spec), &setup(2), &reqs);
    assert!(one.iter().all(|g| g.token_ids.len() == 12));
    // The prompt step was cut into micro-batches; the decode steps were not.
    let c = &two_setup.pipeline_parallel.counters;
    let (micro, steps) = (c.micro_batches.load(Relaxed), c.steps.load(Relaxed));
    assert_eq!(micro, steps + 4, "{micro} micro-batches in {steps} steps");
    assert_eq!(bits(&one), bits(&two), "two stages differ from one process");
    assert_eq!(bits(&two), bits(&again), "two-stage runs differ");
}

fn llama() -> TinyModel {
    TinyModel {
        n_layers: 4,
        ..TinyModel::llama()
    }
}

#[test]
fn llama_two_stages_match_one_process() {
    check_matches_one_process(&llama());
}

#[test]
fn qwen2_two_stages_match_one_process() {
    check_matches_one_process(&TinyModel::qwen2());
}

#[test]
fn gemma3_two_stages_match_one_process() {
    // Sliding-window layers on both stages and the global one on the last: KV groups.
    check_matches_one_process(&TinyModel::gemma3());
}

/// A LoRA adapter on two stages: each stage adds it in its own layers; one process's bits.
#[test]
fn lora_adapters_with_two_stages_match_one_process() {
    let spec = llama();
    let reqs = common::split::with_adapter(&spec, &requests()[..2]);
    let one = common::run_engine(common::tiny(&spec), &base(), &reqs);
    common::split::assert_adapter_changed_outputs(&one, 0.0);
    let two = common::run_engine(common::tiny(&spec), &setup(2), &reqs);
    assert_eq!(bits(&one), bits(&two), "two stages differ from one process");
}

#[test]
fn engine_features_with_two_stages() {
    // Every feature at once (common/features.rs): still one process's bits, and each ran.
    let one = common::split::with_features(base());
    let reqs = common::split::shared_head_requests();
    let two = EngineSetup {
        pipeline_parallel: pp(2, None),
        ..one.clone()
    };
    let spec = TinyModel::qwen2();
    let a = common::run_engine(common::tiny(&spec), &one, &reqs);
    let (b, stats) = common::run_engine_with_stats(common::tiny(&spec), &two, &reqs);
    assert_eq!(bits(&a), bits(&b), "two stages differ from one process");
    common::split::assert_features_ran(&stats);
}

/// Three prompts of 7, 30 and 1 tokens in one step, on disjoint blocks.
fn step_batch() -> ForwardBatch {
    let tables: Vec<Vec<Vec<u32>>> = (0..3).map(|s| vec![vec![2 * s, 2 * s + 1]]).collect();
    let prompts = [
        common::prompt(7, 4, 250, 1),
        common::prompt(30, 4, 250, 2),
        common::prompt(1, 4, 250, 3),
    ];
    let seqs: Vec<SeqChunk<'_>> = prompts
        .iter()
        .zip(&tables)
        .zip([Logits::All, Logits::Last, Logits::Last])
        .map(|((p, t), logits)| SeqChunk {
            tokens: p,
            start: 0,
            block_tables: t,
            logits,
        })
        .collect();
    ForwardBatch::from_seqs(&seqs, 16)
}

fn file(spec: &TinyModel) -> Model {
    Model::load(Arc::new(GgufFile::from_bytes(spec.to_bytes()).unwrap())).unwrap()
}

#[test]
fn micro_batches_give_the_logits_of_the_whole_step() {
    let spec = llama();
    let batch = step_batch();
    let plan = || KvGroupPlan::single(spec.n_layers);
    let mut whole = CpuExecutor::with_plan(file(&spec), plan(), 8, 16).unwrap();
    let expected: Vec<u32> = whole
        .forward(&batch)
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect();
    assert_eq!(expected.len(), (7 + 2) * spec.vocab_size);
    for micro in [Some(1), Some(2), Some(5), None] {
        let mut exec =
            CpuExecutor::pipeline_parallel(file(&spec), &pp(2, micro), None, plan(), 8, 16)
                .unwrap();
        let got: Vec<u32> = exec
            .forward(&batch)
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect();
        assert!(got == expected, "{micro:?} micro-batches: other logits");
    }
}

#[test]
fn each_stage_holds_about_half_the_weights() {
    let spec = TinyModel {
        n_layers: 8,
        ..TinyModel::llama()
    };
    let one = file(&spec).weight_bytes();
    let (core, _) = build_engine(file(&spec), &setup(2)).unwrap();
    let layout = core.executor().executor().layout();
    assert_eq!(
        (layout.pipeline_parallel_size, layout.tensor_parallel_size),
        (2, 1)
    );
    let parts: Vec<_> = layout.ranks.iter().map(|r| r.weight_bytes).collect();
    assert_eq!(parts.iter().sum::<u64>(), one, "{parts:?} of {one}");
    for (r, &b) in parts.iter().enumerate() {
        let share = b as f64 / one as f64;
        assert!((0.4..0.6).contains(&share), "stage {r} holds {share:.2}");
    }
    assert_eq!(layout.ranks[0].layers, 0..4);
    assert_eq!(layout.ranks[1].layers, 4..8);
    assert_eq!(layout.ranks[0].vocab, None);
}

fn start_error(spec: &TinyModel, setup: &EngineSetup) -> ModelError {
    match build_engine(common::tiny(spec), setup) {
        Ok(_) => panic!("the layout should be refused"),
        Err(e) => e,
    }
}

#[test]
fn layouts_it_cannot_run_are_start_up_errors() {
    let e = start_error(&TinyModel::llama(), &setup(3));
    assert!(
        matches!(
            e,
            ModelError::PipelineParallel(PpError::MoreStagesThanLayers { size: 3, layers: 2 })
        ),
        "{e}"
    );
    let both = EngineSetup {
        tensor_parallel: TensorParallelConfig::new(2),
        ..setup(2)
    };
    let e = start_error(&llama(), &both);
    assert!(
        matches!(
            e,
            ModelError::PipelineParallel(PpError::WithTensorParallel { tp: 2, pp: 2 })
        ),
        "{e}"
    );
    let mut shift = setup(2);
    shift.scheduler.context_shift_keep = Some(4);
    shift.sliding_window_freeing = false;
    let e = start_error(&llama(), &shift);
    assert!(
        matches!(e, ModelError::PipelineParallel(PpError::Unsupported(_))),
        "{e}"
    );
}

#[test]
fn a_failed_stage_fails_its_requests_without_a_hang() {
    common::split::assert_a_failed_rank_fails_cleanly(common::tiny(&llama()), &setup(2), "stage 1");
}
