//! The generation driver on a tiny model: chunked prefill changes nothing, stops and lengths end
//! generation with the right reason, seeded sampling repeats, and bad requests are errors.
#![allow(clippy::unwrap_used)]

mod common;

use pagoda_core::SamplingParams;
use pagoda_model::{CpuExecutor, FinishReason, GenerateOptions, ModelError, generate};
use pagoda_testkit::tiny_model::TinyModel;

fn exec() -> CpuExecutor {
    CpuExecutor::new(common::tiny(&TinyModel::gemma3()), 8, 16).unwrap()
}

#[test]
fn chunked_prefill_generates_the_same_tokens() {
    let prompt = common::prompt(37, 4, 256, 5);
    let params = SamplingParams {
        logprobs: Some(3),
        ignore_eos: true,
        ..SamplingParams::greedy(12)
    };
    let mut e = exec();
    let whole = generate(
        &mut e,
        &prompt,
        &GenerateOptions::new(params.clone()),
        |_| {},
    )
    .unwrap();
    let mut streamed = Vec::new();
    let opts = GenerateOptions {
        prefill_chunk: Some(5),
        ..GenerateOptions::new(params)
    };
    let chunked = generate(&mut e, &prompt, &opts, |t| streamed.push(t)).unwrap();
    assert_eq!(whole.token_ids.len(), 12);
    assert_eq!(whole.finish_reason, FinishReason::Length);
    assert_eq!(whole.token_ids, chunked.token_ids);
    assert_eq!(streamed, chunked.token_ids);
    for (a, b) in whole.logprobs.iter().zip(&chunked.logprobs) {
        assert_eq!(a.top_logprobs.len(), 3);
        assert_eq!(
            a.top_logprobs[0].token_id, a.token_id,
            "greedy picks the top token"
        );
        assert!(
            (a.logprob - b.logprob).abs() < 1e-3,
            "{} vs {}",
            a.logprob,
            b.logprob
        );
    }
}

#[test]
fn stop_ids_and_seeds() {
    let prompt = common::prompt(10, 4, 256, 9);
    let mut e = exec();
    let greedy = generate(
        &mut e,
        &prompt,
        &GenerateOptions::new(SamplingParams {
            ignore_eos: true,
            ..SamplingParams::greedy(6)
        }),
        |_| {},
    )
    .unwrap();
    // Stopping on the third greedy token ends there, with reason "stop".
    let stop = greedy.token_ids[2];
    let params = SamplingParams {
        stop_token_ids: vec![stop],
        ignore_eos: true,
        ..SamplingParams::greedy(6)
    };
    let out = generate(&mut e, &prompt, &GenerateOptions::new(params), |_| {}).unwrap();
    let first_stop = greedy.token_ids.iter().position(|&t| t == stop).unwrap();
    assert_eq!(out.token_ids, greedy.token_ids[..=first_stop]);
    assert_eq!(out.finish_reason.as_str(), "stop");

    let random = SamplingParams {
        temperature: 1.5,
        seed: Some(7),
        ignore_eos: true,
        max_tokens: 20,
        ..Default::default()
    };
    let a = generate(
        &mut e,
        &prompt,
        &GenerateOptions::new(random.clone()),
        |_| {},
    )
    .unwrap();
    let b = generate(
        &mut e,
        &prompt,
        &GenerateOptions::new(random.clone()),
        |_| {},
    )
    .unwrap();
    assert_eq!(a.token_ids, b.token_ids);
    let c = generate(
        &mut e,
        &prompt,
        &GenerateOptions::new(SamplingParams {
            seed: Some(8),
            ..random
        }),
        |_| {},
    )
    .unwrap();
    assert_ne!(a.token_ids, c.token_ids);
}

#[test]
fn bad_requests_are_errors() {
    let mut e = exec();
    let err = generate(
        &mut e,
        &[],
        &GenerateOptions::new(SamplingParams::greedy(4)),
        |_| {},
    )
    .unwrap_err();
    assert!(matches!(err, ModelError::InvalidRequest(_)), "{err}");
    // 8 blocks of 16 slots hold 128 tokens.
    let long = common::prompt(120, 4, 256, 1);
    let err = generate(
        &mut e,
        &long,
        &GenerateOptions::new(SamplingParams::greedy(20)),
        |_| {},
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            ModelError::KvCacheFull {
                needed: 9,
                available: 8
            }
        ),
        "{err}"
    );
    let bad = SamplingParams {
        top_p: 0.0,
        ..SamplingParams::greedy(4)
    };
    let err = generate(&mut e, &[5], &GenerateOptions::new(bad), |_| {}).unwrap_err();
    assert!(err.to_string().contains("top_p"), "{err}");
}
