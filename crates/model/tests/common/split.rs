//! What a split model (tensor or pipeline parallelism) must keep doing, checked the same way for
//! both: every engine feature at once (prefix caching over three prompts sharing a 48-token head,
//! chunked prefill at 24 tokens a step, n-gram speculation, int8 KV) with proof that each ran,
//! and a rank that fails mid-request failing its requests, and every later one, without a hang;
//! and requests with a LoRA adapter beside requests without one.

use std::sync::Arc;

use pagoda_core::{
    EngineRequest, EngineStats, FinishReason, LoraRef, NumSpecTokens, SamplingParams, SpecConfig,
    SpecMethod,
};
use pagoda_gguf::{GgmlType, GgufFile};
use pagoda_model::{
    EngineSetup, KvCacheDtype, LoraAdapter, LoraOptions, Model, ModelConfig, build_engine,
};
use pagoda_testkit::lora_adapter::{ALL_STEMS, RandomLora, gguf_adapter, projection_shapes};
use pagoda_testkit::tiny_model::TinyModel;

/// `base` with every feature on.
pub fn with_features(mut base: EngineSetup) -> EngineSetup {
    base.kv_cache_dtype = KvCacheDtype::Int8;
    base.scheduler.long_prefill_token_threshold = 24;
    base.speculative = Some(SpecConfig {
        method: SpecMethod::Ngram { min_n: 1, max_n: 3 },
        num_speculative_tokens: NumSpecTokens::Fixed(3),
    });
    base
}

/// Three greedy requests with logprobs whose prompts share a 48-token head.
pub fn shared_head_requests() -> Vec<(Vec<u32>, SamplingParams)> {
    let head = super::prompt(48, 4, 250, 9);
    (0..3u32)
        .map(|i| {
            let mut prompt = head.clone();
            prompt.extend(head.iter().take(8 + i as usize));
            let mut p = SamplingParams::greedy(12);
            p.ignore_eos = true;
            p.logprobs = Some(2);
            (prompt, p)
        })
        .collect()
}

/// `reqs`, each twice in a row: first with a random rank-8 adapter on every projection of
/// `spec`'s model, then without (a batch mixing adapted and base rows).
pub fn with_adapter(
    spec: &TinyModel,
    reqs: &[(Vec<u32>, SamplingParams)],
) -> Vec<(Vec<u32>, SamplingParams)> {
    let base = GgufFile::from_bytes(spec.to_bytes()).unwrap();
    let c = ModelConfig::from_gguf(&base).unwrap();
    let r = RandomLora::new(8, &ALL_STEMS, 5);
    let shapes = projection_shapes(c.d_model, c.q_dim(), c.kv_dim(), c.ffn_dim);
    let tensors = r.tensors(c.n_layers, &shapes);
    // Four times the usual scale: an effect on the tokens far above the ranks' float noise.
    let alpha = 4.0 * r.alpha;
    let bytes = gguf_adapter(c.architecture.name(), alpha, &tensors, GgmlType::F32).to_bytes();
    let file = GgufFile::from_bytes(bytes).unwrap();
    let adapter = LoraAdapter::from_gguf(&file, &c, &LoraOptions::default()).unwrap();
    let lora = LoraRef::new("random", adapter.digest(), Arc::new(adapter));
    reqs.iter()
        .flat_map(|(prompt, params)| {
            let adapted = SamplingParams {
                lora: Some(lora.clone()),
                ..params.clone()
            };
            [(prompt.clone(), adapted), (prompt.clone(), params.clone())]
        })
        .collect()
}

/// The adapter of [`with_adapter`]'s requests changed what they generated: their tokens, or
/// their log-probabilities by more than `noise` (what a split may move them by).
pub fn assert_adapter_changed_outputs(out: &[super::Generated], noise: f32) {
    let effect = out
        .chunks_exact(2)
        .map(|p| {
            if p[0].token_ids != p[1].token_ids {
                return f32::INFINITY;
            }
            let top = |g: &super::Generated| -> Vec<f32> {
                g.logprobs
                    .iter()
                    .flat_map(|l| l.top.iter().map(|t| t.logprob))
                    .collect()
            };
            top(&p[0])
                .iter()
                .zip(top(&p[1]))
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f32::max)
        })
        .fold(0.0, f32::max);
    assert!(
        effect > 10.0 * noise,
        "the adapter barely changed the outputs: {effect}"
    );
}

/// The prompts' shared head came from the cache, and n-gram proposals were made and accepted.
pub fn assert_features_ran(stats: &EngineStats) {
    assert!(
        stats.prefix_hit_tokens > 0,
        "no prefix-cache hit: {}",
        stats.prefix_queried_tokens
    );
    let spec = stats.spec.as_ref().expect("speculation was on");
    assert!(
        spec.num_drafts > 0 && spec.num_accepted_tokens > 0,
        "{spec:?}"
    );
}

/// Poisons rank 1 after a healthy step: the request in flight ends with an error naming
/// `rank_1` ("rank 1", "stage 1"), so does a request sent after it, and dropping the engine
/// joins the rank threads.
pub fn assert_a_failed_rank_fails_cleanly(model: Model, setup: &EngineSetup, rank_1: &str) {
    let (mut core, _) = build_engine(model, setup).unwrap();
    let add = |core: &mut pagoda_core::EngineCore<pagoda_model::ModelRunner>, id: u64| {
        core.add_request(EngineRequest {
            id,
            prompt_token_ids: super::prompt(12, 4, 250, id as u32),
            params: SamplingParams::greedy(8),
            priority: 0,
            tenant: Default::default(),
            extra_keys: Default::default(),
        })
        .unwrap();
    };
    add(&mut core, 0);
    core.step(); // a healthy step first
    let group = core.executor().executor().rank_group().unwrap();
    group.poison(1);
    let mut finish = None;
    for _ in 0..4 {
        for o in core.step() {
            if o.request_id == 0 && o.finish_reason.is_some() {
                finish = o.finish_reason;
            }
        }
        if finish.is_some() {
            break;
        }
    }
    match finish {
        Some(FinishReason::Error(msg)) => assert!(msg.contains(rank_1), "{msg}"),
        other => panic!("expected an error, got {other:?}"),
    }
    // The group stays failed: a new request fails at once instead of waiting on rank 1.
    add(&mut core, 1);
    let outs = core.step();
    assert!(
        outs.iter()
            .any(|o| matches!(&o.finish_reason, Some(FinishReason::Error(_)))),
        "a request after the failure should fail"
    );
    drop(core); // joins the rank threads: must not hang
}
