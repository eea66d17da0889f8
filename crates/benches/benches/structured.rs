//! Throughput of 16 JSON-schema-constrained requests against the same 16 requests without a
//! constraint, each made to generate exactly as many tokens as its constrained twin (so both
//! runs have the same batch shape step by step). Printed as a table, not criterion: each figure
//! is one long run. `cargo bench -p pagoda-benches --bench structured [-- MODEL_FILE]`
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pagoda_core::{EngineCore, EngineRequest, SamplingParams};
use pagoda_frontend::Tokenizer;
use pagoda_model::{EngineSetup, Model, ModelRunner, build_engine};
use pagoda_structured::{Constraint, StructuredOutputs};

const SCHEMA: &str = r#"{"type": "object", "properties": {
  "name": {"type": "string", "maxLength": 24},
  "age": {"type": "integer", "minimum": 0, "maximum": 120},
  "hobbies": {"type": "array", "items": {"type": "string", "maxLength": 16}, "minItems": 2, "maxItems": 4},
  "city": {"type": "string", "maxLength": 16}},
  "required": ["name", "age", "hobbies", "city"], "additionalProperties": false}"#;

fn path(file: &str) -> PathBuf {
    std::env::var_os("PAGODA_MODEL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/pagoda/models")
        })
        .join(file)
}

/// Runs the requests; returns (wall time, generated tokens per request).
fn run(core: &mut EngineCore<ModelRunner>, reqs: Vec<EngineRequest>) -> (Duration, Vec<usize>) {
    let n = reqs.len();
    for r in reqs {
        core.add_request(r).unwrap();
    }
    let mut lens = vec![0; n];
    let t = Instant::now();
    while core.has_work() {
        for o in core.step() {
            lens[o.request_id as usize] += o.new_token_ids.len();
        }
    }
    (t.elapsed(), lens)
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let files = if args.is_empty() {
        vec![
            "SmolLM2-135M-Instruct.Q4_1.gguf".to_string(),
            "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf".to_string(),
        ]
    } else {
        args
    };
    println!("| model | run | requests | tokens | wall s | tokens/s |");
    println!("|---|---|---|---|---|---|");
    for file in files {
        let gguf = pagoda_gguf::GgufFile::open(&path(&file)).unwrap();
        let tok = Arc::new(Tokenizer::from_gguf(&gguf).unwrap());
        let so = Arc::new(StructuredOutputs::new(tok.clone()));
        so.warm_up().unwrap();
        let constraint = so
            .compile(&Constraint::JsonSchema(SCHEMA.into()))
            .unwrap()
            .into_ref();
        let setup = EngineSetup {
            kv_cache_memory: Some(512 << 20),
            // Both runs prefill their prompts: the second must not hit the first's cache.
            enable_prefix_caching: false,
            ..EngineSetup::default()
        };
        let prompt = |i: usize| {
            tok.encode(
                &format!("<|im_start|>user\nDescribe person number {i} as JSON with name, age, hobbies and city.<|im_end|>\n<|im_start|>assistant\n"),
                false,
                true,
            )
        };
        let req = |i: usize, params: SamplingParams| EngineRequest {
            id: i as u64,
            prompt_token_ids: prompt(i),
            params,
            priority: 0,
            tenant: Default::default(),
            extra_keys: Default::default(),
        };
        let sampled = |i: usize| SamplingParams {
            temperature: 0.8,
            seed: Some(i as u64),
            max_tokens: 96,
            ..Default::default()
        };
        let mut core = build_engine(Model::open(&path(&file)).unwrap(), &setup)
            .unwrap()
            .0;
        let constrained: Vec<_> = (0..16)
            .map(|i| {
                req(
                    i,
                    SamplingParams {
                        constraint: Some(constraint.clone()),
                        ..sampled(i)
                    },
                )
            })
            .collect();
        let (t_c, lens) = run(&mut core, constrained);
        let free: Vec<_> = (0..16)
            .map(|i| {
                req(
                    i,
                    SamplingParams {
                        max_tokens: lens[i] as u32,
                        ignore_eos: true,
                        ..sampled(i)
                    },
                )
            })
            .collect();
        let (t_f, lens_f) = run(&mut core, free);
        assert_eq!(lens, lens_f);
        let total: usize = lens.iter().sum();
        for (name, t) in [("constrained", t_c), ("unconstrained", t_f)] {
            println!(
                "| {file} | {name} | 16 | {total} | {:.2} | {:.1} |",
                t.as_secs_f64(),
                total as f64 / t.as_secs_f64()
            );
        }
    }
}
