//! The model runner behind the engine, on a tiny random-weight model: chunked prefill changes
//! nothing, prompt logprobs equal the logprobs of a plain forward pass, stop ids end generation,
//! seeds repeat, `n` sequences differ, and bad requests are refused before they run.
#![allow(clippy::unwrap_used)]

use crate::common;

use pagoda_core::{AddRequestError, EngineRequest, FinishReason, LimitError, SamplingParams};
use pagoda_model::{CpuExecutor, build_engine, sampler};
use pagoda_testkit::tiny_model::TinyModel;

fn model() -> pagoda_model::Model {
    common::tiny(&TinyModel::gemma3())
}

fn setup(threshold: usize) -> pagoda_model::EngineSetup {
    let mut s = common::small_setup();
    s.scheduler.long_prefill_token_threshold = threshold;
    s.max_model_len = None;
    s
}

#[test]
fn chunked_prefill_and_prompt_logprobs() {
    let prompt = common::prompt(37, 4, 256, 5);
    let params = SamplingParams {
        logprobs: Some(3),
        prompt_logprobs: Some(2),
        ignore_eos: true,
        ..SamplingParams::greedy(12)
    };
    let whole = common::run_engine(model(), &setup(0), &[(prompt.clone(), params.clone())]);
    let chunked = common::run_engine(model(), &setup(5), &[(prompt.clone(), params)]);
    let (a, b) = (&whole[0], &chunked[0]);
    assert_eq!(a.token_ids.len(), 12);
    assert_eq!(a.finish, Some(FinishReason::Length));
    assert_eq!(a.token_ids, b.token_ids);
    for (x, y) in a.logprobs.iter().zip(&b.logprobs) {
        assert_eq!(x.top.len(), 3);
        assert_eq!(x.top[0].token_id, x.token_id, "greedy picks the top token");
        assert!((x.logprob - y.logprob).abs() < 1e-3);
    }
    // Prompt logprobs: one per prompt token after the first, from one plain forward pass.
    assert_eq!(a.prompt_logprobs.len(), prompt.len() - 1);
    assert_eq!(b.prompt_logprobs.len(), prompt.len() - 1);
    let mut exec = CpuExecutor::new(model(), 8, 16).unwrap();
    let table: Vec<u32> = (0..8).collect();
    let logits = common::logits_in_chunks(&mut exec, &prompt, &[prompt.len()], &table);
    let vocab = exec.vocab_size();
    for (i, lp) in a.prompt_logprobs.iter().enumerate() {
        let want =
            sampler::position_logprobs(&logits[i * vocab..(i + 1) * vocab], prompt[i + 1], 2);
        assert_eq!(lp.token_id, prompt[i + 1]);
        assert!((lp.logprob - want.logprob).abs() < 1e-4, "position {i}");
        assert_eq!(lp.top.len(), 2);
        assert!((b.prompt_logprobs[i].logprob - lp.logprob).abs() < 1e-3);
    }
}

#[test]
fn stop_ids_seeds_and_n() {
    let prompt = common::prompt(10, 4, 256, 9);
    let greedy = SamplingParams {
        ignore_eos: true,
        ..SamplingParams::greedy(6)
    };
    let g = &common::run_engine(model(), &setup(0), &[(prompt.clone(), greedy.clone())])[0];
    let stop = g.token_ids[2];
    let first = g.token_ids.iter().position(|&t| t == stop).unwrap();
    let stopped = SamplingParams {
        stop_token_ids: vec![stop],
        ..greedy
    };
    let s = &common::run_engine(model(), &setup(0), &[(prompt.clone(), stopped)])[0];
    assert_eq!(s.token_ids, g.token_ids[..=first]);
    assert_eq!(s.finish, Some(FinishReason::Stop(stop)));

    let random = SamplingParams {
        temperature: 1.5,
        seed: Some(7),
        ignore_eos: true,
        max_tokens: 20,
        ..Default::default()
    };
    let other_seed = SamplingParams {
        seed: Some(8),
        ..random.clone()
    };
    let r = common::run_engine(
        model(),
        &setup(0),
        &[
            (prompt.clone(), random.clone()),
            (prompt.clone(), random.clone()),
            (prompt.clone(), other_seed),
        ],
    );
    assert_eq!(r[0].token_ids, r[1].token_ids);
    assert_ne!(r[0].token_ids, r[2].token_ids);

    // n = 3: three sequences with consecutive seeds, all different, all full length.
    let (mut core, _) = build_engine(model(), &setup(0)).unwrap();
    core.add_request(EngineRequest {
        id: 1,
        prompt_token_ids: prompt.clone(),
        params: SamplingParams { n: 3, ..random },
        priority: 0,
        tenant: Default::default(),
        extra_keys: Default::default(),
    })
    .unwrap();
    let mut seqs = vec![Vec::new(); 3];
    while core.has_work() {
        for o in core.step() {
            seqs[o.index as usize].extend(o.new_token_ids);
        }
    }
    assert!(seqs.iter().all(|s| s.len() == 20));
    assert_ne!(seqs[0], seqs[1]);
    assert_ne!(seqs[1], seqs[2]);
    assert_eq!(
        seqs[0], r[0].token_ids,
        "sequence 0 uses the request's seed"
    );
}

#[test]
fn bad_requests_are_refused() {
    let (mut core, report) = build_engine(model(), &setup(0)).unwrap();
    let req = |prompt: Vec<u32>, max_tokens: u32| EngineRequest {
        id: 0,
        prompt_token_ids: prompt,
        params: SamplingParams::greedy(max_tokens),
        priority: 0,
        tenant: Default::default(),
        extra_keys: Default::default(),
    };
    assert_eq!(
        core.add_request(req(vec![], 4)),
        Err(AddRequestError::Invalid(LimitError::EmptyPrompt))
    );
    assert!(matches!(
        core.add_request(req(vec![1, 100_000], 4)),
        Err(AddRequestError::Invalid(LimitError::BadToken {
            position: 1,
            ..
        }))
    ));
    let long = common::prompt(report.max_model_len, 4, 256, 1);
    assert!(matches!(
        core.add_request(req(long, 4)),
        Err(AddRequestError::Invalid(LimitError::TooLong { .. }))
    ));
    assert!(!core.has_work());
}
