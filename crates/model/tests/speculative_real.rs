//! Speculative decoding on the real Qwen2.5-Coder pair (1.5B target, 0.5B draft: one vocabulary;
//! suffix proposals on the 0.5B alone, whose verification path the n-gram and combined proposers
//! share and which tiny models check for them): with suffix and draft-model proposals, every
//! request of a mixed batch (a code edit that copies its prompt, a chat answer, a JSON-schema
//! constrained answer, logprobs, a seeded sampled `n = 2`) gives exactly the tokens and logprobs of
//! plain decoding (the sampled one under suffix proposals only: a draft model samples its
//! proposals, so its law is kept, not its seeded stream), and the copying request has most of its
//! proposals accepted. A draft of another vocabulary is refused at build time.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;

use pagoda_core::{
    EngineCore, EngineRequest, FinishReason, ModelExecutor, NumSpecTokens, SamplingParams,
    SpecConfig, SpecCounters, SpecMethod,
};
use pagoda_frontend::Tokenizer;
use pagoda_model::{EngineSetup, build_engine, build_engine_with_draft};
use pagoda_structured::{Constraint, StructuredOutputs};
use serde_json::json;

const TARGET: &str = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf";
const DRAFT: &str = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf";

fn chat(tok: &Tokenizer, user: &str) -> Vec<u32> {
    let text = format!(
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
    );
    tok.encode(&text, false, true)
}

fn requests(tok: &Arc<Tokenizer>) -> Vec<(Vec<u32>, SamplingParams)> {
    let code = "fn area(w: u32, h: u32) -> u32 {\n    w * h\n}\n\nfn perimeter(w: u32, h: u32) -> u32 {\n    2 * (w + h)\n}\n";
    let edit = format!(
        "Rename `area` to `surface` and return the whole file in a ```rust block:\n```rust\n{code}```"
    );
    let structured = StructuredOutputs::new(tok.clone());
    let schema = json!({"type": "object", "properties": {"city": {"type": "string"},
        "population": {"type": "integer"}}, "required": ["city", "population"]});
    let constraint = structured
        .compile(&Constraint::JsonSchema(schema.to_string()))
        .unwrap()
        .into_ref();
    // 16 tokens hold the renamed signature and several verification rounds per method; 32
    // doubled the 1.5B target's decode steps in each of the three runs.
    let greedy = SamplingParams::greedy(16);
    vec![
        (chat(tok, &edit), greedy.clone()),
        (
            chat(tok, "Name three uses of a hash map, one line each."),
            SamplingParams {
                logprobs: Some(2),
                ..greedy.clone()
            },
        ),
        (
            chat(
                tok,
                "The largest city of Japan and its population, as JSON.",
            ),
            SamplingParams {
                constraint: Some(constraint),
                ..greedy.clone()
            },
        ),
        (
            chat(tok, "Write a haiku about rust."),
            SamplingParams {
                temperature: 0.8,
                top_p: 0.95,
                seed: Some(3),
                n: 2,
                max_tokens: 12,
                ..Default::default()
            },
        ),
    ]
}

type Outputs = BTreeMap<(u64, u32), (Vec<u32>, Vec<f32>)>;

/// Every request twice in one engine: first with speculation off (`num_speculative_tokens:
/// Some(0)`, plain decoding), prefilled alone so that the second copies, with the engine's
/// speculation, find their prompts in the prefix cache (a hit gives the same bits: `kv_disk`,
/// `engine`). Ids `i` are plain, `PLAIN_TO_SPEC + i` speculative. One engine per method
/// instead of a plain run and one per method: the 1.5B target's prefills were most of the time.
fn run(target: &str, spec: SpecConfig, tok: &Arc<Tokenizer>) -> (Outputs, SpecCounters) {
    let setup = EngineSetup {
        kv_cache_memory: Some(256 << 20),
        max_model_len: Some(1024),
        speculative: Some(spec.clone()),
        ..EngineSetup::default()
    };
    let draft =
        matches!(spec.method, SpecMethod::DraftModel { .. }).then(|| common::load_model(DRAFT));
    let (mut core, _) = build_engine_with_draft(common::load_model(target), draft, &setup).unwrap();
    let mut out = Outputs::new();
    let mut reqs = requests(tok);
    if matches!(spec.method, SpecMethod::DraftModel { .. }) {
        // A draft model samples its proposals: a seeded request keeps its law, not its seeded
        // stream, so there is nothing to compare (speculative_sampled.rs checks the law).
        reqs.pop();
    }
    for (i, (prompt, params)) in reqs.iter().enumerate() {
        let plain = SamplingParams {
            num_speculative_tokens: Some(0),
            ..params.clone()
        };
        add(&mut core, i as u64, prompt.clone(), plain);
    }
    drain(&mut core, &mut out);
    for (i, (prompt, params)) in reqs.into_iter().enumerate() {
        add(&mut core, PLAIN_TO_SPEC + i as u64, prompt, params);
    }
    while core.has_work() {
        drain(&mut core, &mut out);
    }
    core.scheduler().kv().check_invariants().unwrap();
    (out, core.stats().spec.unwrap())
}

/// One engine step, its outputs appended to `out`.
fn drain<E: ModelExecutor>(core: &mut EngineCore<E>, out: &mut Outputs) {
    for o in core.step() {
        assert!(
            !matches!(o.finish_reason, Some(FinishReason::Error(_))),
            "{o:?}"
        );
        let e = out.entry((o.request_id, o.index)).or_default();
        e.0.extend(o.new_token_ids);
        e.1.extend(o.logprobs.iter().map(|l| l.logprob));
    }
}

fn add<E: ModelExecutor>(
    core: &mut EngineCore<E>,
    id: u64,
    prompt: Vec<u32>,
    params: SamplingParams,
) {
    core.add_request(EngineRequest {
        id,
        prompt_token_ids: prompt,
        params,
        priority: 0,
        extra_keys: Default::default(),
        tenant: Default::default(),
    })
    .unwrap();
}

/// Request `i`'s speculative copy is `PLAIN_TO_SPEC + i`.
const PLAIN_TO_SPEC: u64 = 100;

#[test]
fn every_method_matches_plain_decoding_on_the_qwen_pair() {
    let gguf = pagoda_gguf::GgufFile::open(&common::model_dir().join(TARGET)).unwrap();
    let tok = Arc::new(Tokenizer::from_gguf(&gguf).unwrap());
    let draft = SpecMethod::DraftModel { path: DRAFT.into() };
    // The n-gram proposer shares the suffix proposer's verification path on the engine side
    // (its proposals are checked in crates/speculative and on tiny models); the real pair runs the two
    // that differ there, a prompt-copying proposer and a draft model, to keep CI time. The
    // prompt-copying proposer needs no draft, so it runs on the 0.5B (one vocabulary, a third
    // of the 1.5B's cost). K is fixed: `auto` times forwards of the target at start-up, and its
    // tokens are checked against plain decoding on the tiny models (speculative.rs).
    for (target, method, k) in [
        (DRAFT, SpecMethod::Suffix, NumSpecTokens::Fixed(4)),
        (TARGET, draft, NumSpecTokens::Fixed(3)),
    ] {
        let name = format!("{} {k:?} on {target}", method.name());
        let method_is_draft = matches!(method, SpecMethod::DraftModel { .. });
        let (got, c) = run(
            target,
            SpecConfig {
                method,
                num_speculative_tokens: k,
            },
            &tok,
        );
        let edited = tok.decode(&got[&(0, 0)].0, true);
        assert!(edited.contains("fn surface"), "{name}: {edited}");
        let mut sequences: Vec<u32> = requests(&tok).iter().map(|r| r.1.n).collect();
        if method_is_draft {
            sequences.pop();
        }
        let sequences = sequences.iter().sum::<u32>() as usize;
        assert_eq!(got.len(), 2 * sequences, "{name}: one output per sequence");
        for (key, want) in got.iter().filter(|(k, _)| k.0 < PLAIN_TO_SPEC) {
            let have = &got[&(PLAIN_TO_SPEC + key.0, key.1)];
            assert_eq!(
                have.0,
                want.0,
                "{name}: request {key:?}: {:?} vs {:?}",
                tok.decode(&have.0, false),
                tok.decode(&want.0, false)
            );
            assert_eq!(have.1, want.1, "{name}: logprobs of {key:?}");
        }
        // Copying and a 0.5B draft of the same family: well over a third of proposals hold.
        assert!(
            c.num_accepted_tokens * 3 > c.num_draft_tokens && c.num_drafts > 0,
            "{name}: few proposals accepted: {c:?}"
        );
    }
}

#[test]
fn a_draft_of_another_vocabulary_is_refused() {
    let setup = EngineSetup {
        kv_cache_memory: Some(64 << 20),
        speculative: Some(SpecConfig {
            method: SpecMethod::DraftModel {
                path: "smollm2".into(),
            },
            num_speculative_tokens: NumSpecTokens::Fixed(2),
        }),
        ..EngineSetup::default()
    };
    let err = build_engine_with_draft(
        common::load_model(DRAFT),
        Some(common::load_model("SmolLM2-135M-Instruct.Q4_1.gguf")),
        &setup,
    )
    .err()
    .unwrap()
    .to_string();
    assert!(err.contains("vocabulary"), "{err}");
    // Without the draft loaded, the build says so instead of running without it.
    assert!(build_engine(common::load_model(DRAFT), &setup).is_err());
}
