//! The engine features a split model (tensor or pipeline parallelism) must keep, all at once:
//! prefix caching (three prompts sharing a 48-token head), chunked prefill (24 tokens a step),
//! n-gram speculation (verify steps want logits on several rows of a sequence) and int8 KV;
//! and the check that each of them really ran in the split engine.

use pagoda_core::{EngineStats, NumSpecTokens, SamplingParams, SpecConfig, SpecMethod};
use pagoda_model::{EngineSetup, KvCacheDtype};

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
