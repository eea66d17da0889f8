//! Shared helpers of the integration tests: locating the real models and golden files.
#![allow(clippy::unwrap_used)]
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use pagoda_model::Model;

pub mod split;

pub const SMOLLM2: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
pub const GEMMA3: &str = "gemma-3-270m-q4_k_m.gguf";
pub const QWEN2: &str = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf";

/// `$PAGODA_MODEL_DIR`, else `$HOME/.cache/pagoda/models`.
pub fn model_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("PAGODA_MODEL_DIR") {
        return PathBuf::from(d);
    }
    let home = std::env::var_os("HOME").expect("HOME is not set");
    PathBuf::from(home).join(".cache/pagoda/models")
}

/// Loads a real model, failing with a message that says how to fetch it.
pub fn load_model(file: &str) -> Model {
    let path = model_dir().join(file);
    assert!(
        path.exists(),
        "model file {} is missing: run scripts/fetch-models.sh (or set PAGODA_MODEL_DIR)",
        path.display()
    );
    Model::open(&path).unwrap_or_else(|e| panic!("loading {}: {e}", path.display()))
}

/// The golden file of llama.cpp outputs for a model.
pub fn golden(name: &str) -> serde_json::Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../../shared/golden")
        .join(name);
    let path = if path.exists() {
        path
    } else {
        PathBuf::from("/work/shared/golden").join(name)
    };
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

use std::sync::Arc;

use pagoda_gguf::GgufFile;
use pagoda_model::{CpuExecutor, ForwardBatch, Logits, SeqChunk};
use pagoda_testkit::tiny_model::TinyModel;

/// Loads a tiny random-weight model.
pub fn tiny(spec: &TinyModel) -> Model {
    Model::load(Arc::new(GgufFile::from_bytes(spec.to_bytes()).unwrap())).unwrap()
}

/// Runs `tokens` through `exec` as one request using `block_table`, in steps of the given
/// sizes (cycled), and returns the logits of every position, `[tokens.len()][vocab]` flat.
pub fn logits_in_chunks(
    exec: &mut CpuExecutor,
    tokens: &[u32],
    chunks: &[usize],
    block_table: &[u32],
) -> Vec<f32> {
    let bs = exec.kv_cache.block_size();
    let tables = [block_table.to_vec()];
    let mut out = Vec::new();
    let (mut start, mut i) = (0, 0);
    while start < tokens.len() {
        let end = (start + chunks[i % chunks.len()]).min(tokens.len());
        let batch = ForwardBatch::from_seqs(
            &[SeqChunk {
                tokens: &tokens[start..end],
                start,
                block_tables: &tables,
                logits: Logits::All,
            }],
            bs,
        );
        out.extend_from_slice(exec.forward(&batch).unwrap());
        start = end;
        i += 1;
    }
    out
}

/// Largest absolute difference and largest magnitude of two logit arrays.
pub fn max_diff(a: &[f32], b: &[f32]) -> (f32, f32) {
    assert_eq!(a.len(), b.len());
    let d = a
        .iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max);
    let m = a.iter().map(|x| x.abs()).fold(0.0, f32::max);
    (d, m)
}

/// Deterministic pseudo-random prompt of `n` ids in `lo..hi`.
pub fn prompt(n: usize, lo: u32, hi: u32, seed: u32) -> Vec<u32> {
    let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(12345);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            lo + s % (hi - lo)
        })
        .collect()
}

use pagoda_core::{EngineCore, EngineRequest, FinishReason, PositionLogprobs, SamplingParams};
use pagoda_model::{EngineSetup, ModelRunner, build_engine};

/// One request's result from `run_engine`.
pub struct Generated {
    pub token_ids: Vec<u32>,
    pub logprobs: Vec<PositionLogprobs>,
    pub prompt_logprobs: Vec<PositionLogprobs>,
    pub finish: Option<FinishReason>,
}

/// Runs every `(prompt, params)` through an engine over `model`, all in one continuous batch,
/// and returns their results in order.
pub fn run_engine(
    model: Model,
    setup: &EngineSetup,
    reqs: &[(Vec<u32>, SamplingParams)],
) -> Vec<Generated> {
    run_engine_with_stats(model, setup, reqs).0
}

/// [`run_engine`], with the engine's counters at the end (to show a feature actually ran).
pub fn run_engine_with_stats(
    model: Model,
    setup: &EngineSetup,
    reqs: &[(Vec<u32>, SamplingParams)],
) -> (Vec<Generated>, pagoda_core::EngineStats) {
    let (mut core, _) = build_engine(model, setup).unwrap();
    for (i, (prompt, params)) in reqs.iter().enumerate() {
        core.add_request(EngineRequest {
            id: i as u64,
            prompt_token_ids: prompt.clone(),
            params: params.clone(),
            priority: 0,
            tenant: Default::default(),
            extra_keys: Default::default(),
        })
        .unwrap();
    }
    let mut out: Vec<Generated> = (0..reqs.len())
        .map(|_| Generated {
            token_ids: Vec::new(),
            logprobs: Vec::new(),
            prompt_logprobs: Vec::new(),
            finish: None,
        })
        .collect();
    while core.has_work() {
        for o in core.step() {
            let g = &mut out[o.request_id as usize];
            g.token_ids.extend(o.new_token_ids);
            g.logprobs.extend(o.logprobs);
            g.prompt_logprobs
                .extend(o.prompt_logprobs.unwrap_or_default());
            if o.finish_reason.is_some() {
                g.finish = o.finish_reason;
            }
        }
    }
    (out, core.stats())
}

/// One greedy request's tokens, log-probabilities and cached prompt tokens.
pub struct GreedyRun {
    pub tokens: Vec<u32>,
    pub logprobs: Vec<PositionLogprobs>,
    pub cached: usize,
}

/// Runs one greedy request of `max_tokens` (top-5 log-probabilities) to its end on `core`;
/// `check` sees the engine after every step, and the KV invariants are checked after each.
pub fn run_greedy(
    core: &mut EngineCore<ModelRunner>,
    id: u64,
    prompt: &[u32],
    max_tokens: u32,
    mut check: impl FnMut(&EngineCore<ModelRunner>),
) -> GreedyRun {
    core.add_request(EngineRequest {
        id,
        prompt_token_ids: prompt.to_vec(),
        params: SamplingParams {
            max_tokens,
            temperature: 0.0,
            logprobs: Some(5),
            ..Default::default()
        },
        priority: 0,
        tenant: Default::default(),
        extra_keys: Default::default(),
    })
    .unwrap();
    let mut r = GreedyRun {
        tokens: Vec::new(),
        logprobs: Vec::new(),
        cached: 0,
    };
    while core.has_work() {
        for o in core.step() {
            r.tokens.extend(o.new_token_ids);
            r.logprobs.extend(o.logprobs);
            r.cached = o.num_cached_tokens;
        }
        check(core);
        core.scheduler().kv().check_invariants().unwrap();
    }
    r
}

/// A small engine setup for tests: 64 MiB of KV.
pub fn small_setup() -> EngineSetup {
    EngineSetup {
        kv_cache_memory: Some(64 << 20),
        max_model_len: Some(2048),
        ..EngineSetup::default()
    }
}

/// The sentence-transformers directory `dir` of the model directory, fetched by
/// `scripts/fetch-models.sh NAME` when missing (only the tests that need it fetch it).
pub fn fetched_dir(name: &str, dir: &str) -> PathBuf {
    let path = model_dir().join(dir);
    if !path.join("model.safetensors").is_file() {
        let script =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../scripts/fetch-models.sh");
        let status = Command::new("bash").arg(script).arg(name).status().unwrap();
        assert!(status.success(), "scripts/fetch-models.sh {name} failed");
    }
    path
}

/// Runs the Python reference `tests/SCRIPT` on model directory `dir` with `input` as JSON on
/// stdin (`$PYTHON`, default python3) and returns its JSON output.
pub fn python_reference(script: &str, dir: &Path, input: &serde_json::Value) -> serde_json::Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(script);
    pagoda_testkit::python_reference::python_reference(&script, dir, input)
}

/// Cosine of the angle between `a` and the reference `b`, in f64.
pub fn cosine(a: &[f32], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(&x, &y)| x as f64 * y).sum();
    let na: f64 = a.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|y| y * y).sum::<f64>().sqrt();
    dot / (na * nb)
}
