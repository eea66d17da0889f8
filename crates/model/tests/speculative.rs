//! Speculative decoding through the whole engine on tiny random models: with n-gram, suffix and
//! combined (`suffix+ngram`) proposals and with a draft model (the target itself, so nearly
//! everything is accepted, and an unrelated model, so nearly nothing is), every greedy request's
//! tokens and logprobs equal those without speculation, in mixed batches of greedy, seeded-sampled,
//! penalised, `n > 1` and logprob requests, with a KV pool small enough to preempt; and proposals
//! were really made and accepted. Sampled requests equal plain decoding's token for token with
//! token-only proposers; a draft model samples its proposals and the rejection rule keeps only
//! their distribution (speculative_sampled.rs tests that), not the seeded stream.
#![allow(clippy::unwrap_used)]

use crate::common;

use pagoda_core::{NumSpecTokens, SamplingParams, SpecConfig, SpecMethod};
use pagoda_model::{EngineSetup, build_engine_with_draft};
use pagoda_testkit::tiny_model::TinyModel;

/// Prompts that repeat themselves, so prompt lookup finds matches.
fn prompts() -> Vec<Vec<u32>> {
    (0..6u32)
        .map(|i| {
            let motif: Vec<u32> = (0..5 + i).map(|j| 3 + (i * 17 + j * 5) % 200).collect();
            motif
                .iter()
                .cycle()
                .take(40 + 7 * i as usize)
                .copied()
                .collect()
        })
        .collect()
}

fn requests() -> Vec<(Vec<u32>, SamplingParams)> {
    if GREEDY_ONLY.with(|g| g.get()) {
        let mut params = SamplingParams::greedy(48);
        params.ignore_eos = true;
        return prompts().into_iter().map(|p| (p, params.clone())).collect();
    }
    let mut out = Vec::new();
    for (i, p) in prompts().into_iter().enumerate() {
        let mut params = SamplingParams::greedy(48);
        params.ignore_eos = true;
        match i {
            1 => {
                params.temperature = 0.8;
                params.top_p = 0.9;
                params.seed = Some(7);
            }
            2 => {
                params.logprobs = Some(3);
                params.repetition_penalty = 1.1;
            }
            3 => {
                params.n = 2;
                params.temperature = 1.0;
                params.top_k = 20;
                params.seed = Some(11);
            }
            4 => {
                params.frequency_penalty = 0.3;
                params.logit_bias = vec![(5, 2.0)];
                params.min_tokens = 4;
            }
            _ => {}
        }
        out.push((p, params));
    }
    out
}

fn setup(spec: Option<SpecConfig>, kv_bytes: u64) -> EngineSetup {
    EngineSetup {
        kv_cache_memory: Some(kv_bytes),
        max_model_len: Some(256),
        speculative: spec,
        ..EngineSetup::default()
    }
}

fn spec(method: SpecMethod, k: usize) -> SpecConfig {
    SpecConfig {
        method,
        num_speculative_tokens: NumSpecTokens::Fixed(k),
    }
}

/// One choice's (request id, choice index, tokens, logprobs).
type Choice = (u64, u32, Vec<u32>, Vec<f32>);

/// Every request's tokens and logprobs per choice, and the speculation counters.
fn run(
    target: &TinyModel,
    draft: Option<&TinyModel>,
    s: &EngineSetup,
) -> (Vec<Choice>, Option<pagoda_core::SpecCounters>, u64) {
    let (mut core, _) =
        build_engine_with_draft(common::tiny(target), draft.map(common::tiny), s).unwrap();
    for (i, (prompt, params)) in requests().into_iter().enumerate() {
        core.add_request(pagoda_core::EngineRequest {
            id: i as u64,
            prompt_token_ids: prompt,
            params,
            priority: 0,
            extra_keys: Default::default(),
            tenant: Default::default(),
        })
        .unwrap();
    }
    let mut out: std::collections::BTreeMap<(u64, u32), (Vec<u32>, Vec<f32>)> = Default::default();
    let mut steps = 0;
    while core.has_work() {
        steps += 1;
        assert!(
            steps < 20_000,
            "the engine did not drain: {:?}",
            core.stats()
        );
        for o in core.step() {
            let e = out.entry((o.request_id, o.index)).or_default();
            e.0.extend(o.new_token_ids);
            e.1.extend(o.logprobs.iter().map(|l| l.logprob));
            assert!(
                !matches!(o.finish_reason, Some(pagoda_core::FinishReason::Error(_))),
                "{:?}",
                o.finish_reason
            );
        }
    }
    core.scheduler().kv().check_invariants().unwrap();
    assert_eq!(core.scheduler().kv().num_tables(), 0);
    let stats = core.stats();
    (
        out.into_iter()
            .map(|((id, ix), (t, l))| (id, ix, t, l))
            .collect(),
        stats.spec,
        stats.preemptions,
    )
}

thread_local! {
    static GREEDY_ONLY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

#[test]
fn the_target_as_its_own_draft_has_its_greedy_proposals_accepted() {
    GREEDY_ONLY.with(|g| g.set(true));
    let t = target();
    let config = spec(
        SpecMethod::DraftModel {
            path: "tiny".into(),
        },
        4,
    );
    let (plain, _, _) = run(&t, None, &setup(None, 4 << 20));
    let (got, counters, _) = run(&t, Some(&t), &setup(Some(config), 4 << 20));
    assert_eq!(got, plain);
    let c = counters.unwrap();
    // Its own argmax, from the same weights: only batch-shape rounding can differ.
    assert!(
        c.num_accepted_tokens * 10 >= c.num_draft_tokens * 9,
        "{c:?}"
    );
}

fn target() -> TinyModel {
    TinyModel::llama()
}

#[test]
fn every_method_gives_the_tokens_and_logprobs_of_plain_decoding() {
    let t = target();
    let other = TinyModel {
        seed: t.seed + 99,
        ..TinyModel::llama()
    };
    for kv in [4 << 20, 160 << 10] {
        let (plain, none, _) = run(&t, None, &setup(None, kv));
        assert!(none.is_none());
        let cases: Vec<(&str, Option<&TinyModel>, SpecConfig)> = vec![
            (
                "ngram",
                None,
                spec(SpecMethod::Ngram { min_n: 1, max_n: 3 }, 4),
            ),
            (
                "suffix+ngram",
                None,
                spec(SpecMethod::SuffixNgram { min_n: 1, max_n: 3 }, 4),
            ),
            (
                "draft (itself)",
                Some(&t),
                spec(
                    SpecMethod::DraftModel {
                        path: "tiny".into(),
                    },
                    3,
                ),
            ),
            (
                "draft (unrelated)",
                Some(&other),
                spec(
                    SpecMethod::DraftModel {
                        path: "tiny".into(),
                    },
                    2,
                ),
            ),
            // `auto` K: the engine times its steps at start-up and picks K per step from the
            // cost curve and the acceptance so far; the tokens must not depend on the K chosen.
            (
                "suffix (auto K)",
                None,
                SpecConfig {
                    method: SpecMethod::Suffix,
                    num_speculative_tokens: NumSpecTokens::Auto { max: 4 },
                },
            ),
        ];
        for (name, draft, config) in cases {
            let auto = matches!(config.num_speculative_tokens, NumSpecTokens::Auto { .. });
            let (got, counters, preemptions) = run(&t, draft, &setup(Some(config), kv));
            if kv < 1 << 20 {
                // The small pool must really preempt, or this case tests nothing extra.
                assert!(
                    preemptions > 0,
                    "{name}: no preemption with {kv} bytes of KV"
                );
            }
            assert_eq!(got.len(), plain.len());
            let reqs = requests();
            for (a, b) in got.iter().zip(&plain) {
                if draft.is_some() && !reqs[a.0 as usize].1.is_greedy() {
                    assert_eq!(a.2.len(), b.2.len(), "{name}: length of request {}", a.0);
                    continue;
                }
                assert_eq!(a.2, b.2, "{name}, kv {kv}: request {} choice {}", a.0, a.1);
                assert_eq!(a.3, b.3, "{name}: logprobs of request {}", a.0);
            }
            let c = counters.unwrap();
            // `auto` may rightly propose nothing: when the step-cost curve timed at start-up
            // says verifying costs more than it saves (a busy machine, here), K is 0. Its
            // tokens are what this case checks.
            if auto {
                continue;
            }
            assert!(c.num_draft_tokens > 0, "{name}: nothing proposed");
            if name != "draft (unrelated)" {
                assert!(c.num_accepted_tokens > 0, "{name}: nothing accepted: {c:?}");
            }
        }
    }
}
