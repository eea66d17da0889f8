//! Per-token cost of the structured-output mask: a matcher replays a valid JSON answer token by
//! token and each `compute_mask` is timed (median, p99, max), for SmolLM2's 49k and Qwen's
//! 152k vocabularies; also compile time (cold) and a cache hit. Percentiles need every sample,
//! so this is a plain timing binary rather than criterion.
//! Run: `cargo bench -p pagoda-benches --bench mask`

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pagoda_frontend::Tokenizer;
use pagoda_structured::{Constraint, StructuredOutputs};

fn model_dir() -> PathBuf {
    match std::env::var_os("PAGODA_MODEL_DIR") {
        Some(d) => PathBuf::from(d),
        None => {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/pagoda/models")
        }
    }
}

const SCHEMA: &str = r#"{"type": "object", "properties": {
  "name": {"type": "string", "maxLength": 40},
  "age": {"type": "integer", "minimum": 0, "maximum": 150},
  "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 5},
  "address": {"type": "object", "properties": {"city": {"type": "string"},
     "zip": {"type": "string", "pattern": "^[0-9]{5}$"}}, "required": ["city", "zip"]},
  "role": {"enum": ["admin", "user", "guest"]}},
  "required": ["name", "age", "tags", "address", "role"]}"#;

const ANSWER: &str = r#"{"name": "Ada Lovelace, Countess of Lovelace", "age": 36, "tags": ["math", "poetry", "engines"], "address": {"city": "London", "zip": "12345"}, "role": "admin"}"#;

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    for file in [
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    ] {
        let path = model_dir().join(file);
        let Ok(gguf) = pagoda_gguf::GgufFile::open(&path) else {
            eprintln!("skipping {file}: not found in {}", model_dir().display());
            continue;
        };
        let tok = Arc::new(Tokenizer::from_gguf(&gguf).expect("tokenizer"));
        let so = StructuredOutputs::new(tok.clone());
        let t = Instant::now();
        so.warm_up().expect("warm up");
        let warm = t.elapsed();
        let c = Constraint::JsonSchema(SCHEMA.into());
        let t = Instant::now();
        let compiled = so.compile(&c).expect("compile");
        let cold = t.elapsed();
        let t = Instant::now();
        let _ = so.compile(&c).expect("compile");
        let hit = t.elapsed();
        let ids = tok.encode(ANSWER, false, false);
        let mut times = Vec::new();
        let mut clone_times = Vec::new();
        let mut logits = vec![0.0f32; tok.vocab_size()];
        let mut apply_times = Vec::new();
        for _round in 0..20 {
            let t = Instant::now();
            let mut m = compiled.matcher();
            clone_times.push(t.elapsed());
            for &id in &ids {
                let t = Instant::now();
                m.compute_mask().expect("mask");
                times.push(t.elapsed());
                let t = Instant::now();
                m.apply_mask(&mut logits).expect("apply");
                apply_times.push(t.elapsed());
                assert!(
                    m.is_allowed(id).expect("mask"),
                    "the answer left the grammar"
                );
                m.consume(id).expect("consume");
            }
        }
        times.sort();
        apply_times.sort();
        clone_times.sort();
        println!(
            "{file}: vocab {}, trie+factory {:.0?}, compile {:.2?} (cache hit {:.1?}), new matcher {:.0?}",
            tok.vocab_size(),
            warm,
            cold,
            hit,
            pct(&clone_times, 0.5)
        );
        println!(
            "  compute_mask over {} steps: median {:.1?}, p99 {:.1?}, max {:.1?}; apply_mask median {:.1?}",
            times.len(),
            pct(&times, 0.5),
            pct(&times, 0.99),
            times[times.len() - 1],
            pct(&apply_times, 0.5)
        );
    }
}
