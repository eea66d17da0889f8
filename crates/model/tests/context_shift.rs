//! Context shift with the real SmolLM2 and a 256-token context: a greedy request asked for more
//! tokens than the context holds runs on past it (one shift at 256 tokens: the first block
//! kept, 7 of the 14 blocks after it dropped, the rest moved with keys re-rotated), with f16
//! KV; the text after the shift stays as likely under the model as the text before it
//! (keys rotated wrongly, or KV read from the wrong blocks, make it collapse into noise).
#![allow(clippy::unwrap_used)]

use crate::common;

use pagoda_core::{FinishReason, SamplingParams, SchedulerConfig};
use pagoda_model::{EngineSetup, KvCacheDtype};

/// Mean log-probability of the chosen tokens.
fn mean(lp: &[f32]) -> f32 {
    lp.iter().sum::<f32>() / lp.len() as f32
}

#[test]
fn a_request_runs_past_max_model_len_and_stays_coherent() {
    let golden = common::golden("smollm2-135m-q4_1.json");
    // The story opening: a natural-text prompt.
    let prompt: Vec<u32> = golden["prompts"][1]["tokens"]["add_special_true"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap() as u32)
        .collect();
    let max_model_len = 256;
    let max_tokens = 400;
    // The default f16 KV; int8's re-quantized keys are checked against keys rotated at their
    // new positions in kv/shift.rs, every element type, on tiny llama and Gemma 3.
    let dtype = KvCacheDtype::F16;
    {
        let setup = EngineSetup {
            scheduler: SchedulerConfig {
                context_shift_keep: Some(4),
                ..SchedulerConfig::default()
            },
            kv_cache_memory: Some(16 << 20),
            max_model_len: Some(max_model_len),
            kv_cache_dtype: dtype,
            ..EngineSetup::default()
        };
        let params = SamplingParams {
            ignore_eos: true,
            logprobs: Some(0),
            // Greedy loops on a 135M model are normal; a light penalty keeps the text varied so
            // that "coherent" means something.
            repetition_penalty: 1.3,
            ..SamplingParams::greedy(max_tokens)
        };
        let model = common::load_model(common::SMOLLM2);
        let out = common::run_engine(model, &setup, &[(prompt.clone(), params)]);
        let g = &out[0];
        assert_eq!(g.finish, Some(FinishReason::Length), "{dtype:?}");
        assert_eq!(
            g.token_ids.len(),
            max_tokens as usize,
            "{dtype:?}: stopped early"
        );
        // The shift happens when the context reaches 256 tokens.
        let at = max_model_len - prompt.len();
        let lp: Vec<f32> = g.logprobs.iter().map(|p| p.logprob).collect();
        let (before, after) = (mean(&lp[at - 64..at]), mean(&lp[at..at + 64]));
        let distinct = {
            let mut t = g.token_ids[at..at + 64].to_vec();
            t.sort_unstable();
            t.dedup();
            t.len()
        };
        eprintln!(
            "{dtype:?}: mean logprob before the shift {before:.3}, after {after:.3}, {distinct} distinct tokens of 64 after"
        );
        assert!(
            after >= before - 1.0,
            "{dtype:?}: mean logprob {before} before the shift, {after} after"
        );
        assert!(
            distinct >= 16,
            "{dtype:?}: {distinct} distinct tokens after the shift"
        );
    }
}
