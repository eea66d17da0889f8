//! Shared test helpers: locate the real GGUF models and the llama.cpp golden files.

#![allow(dead_code)]

use std::path::PathBuf;

use pagoda_frontend::{ChatTemplate, Tokenizer};
use pagoda_gguf::GgufFile;

pub const SMOLLM: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
pub const GEMMA: &str = "gemma-3-270m-q4_k_m.gguf";
pub const QWEN: &str = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf";

/// $PAGODA_MODEL_DIR, else ~/.cache/pagoda/models.
pub fn model_path(file: &str) -> PathBuf {
    let dir = std::env::var_os("PAGODA_MODEL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME is set"))
                .join(".cache/pagoda/models")
        });
    let path = dir.join(file);
    assert!(
        path.exists(),
        "model {} is missing: run scripts/fetch-models.sh (or set PAGODA_MODEL_DIR)",
        path.display()
    );
    path
}

pub fn open(file: &str) -> GgufFile {
    GgufFile::open(&model_path(file)).expect("GGUF opens")
}

pub fn tokenizer(file: &str) -> Tokenizer {
    Tokenizer::from_gguf(&open(file)).expect("tokenizer builds")
}

pub fn template(file: &str) -> ChatTemplate {
    ChatTemplate::from_gguf(&open(file), None).expect("template compiles")
}

/// The golden file of llama.cpp outputs for a model: shared/golden next to the repository.
pub fn golden(name: &str) -> serde_json::Value {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let candidates = [
        std::env::var_os("PAGODA_GOLDEN_DIR").map(PathBuf::from),
        Some(manifest.join("../../../shared/golden")),
        Some(PathBuf::from("/work/shared/golden")),
    ];
    for dir in candidates.into_iter().flatten() {
        let p = dir.join(name);
        if let Ok(text) = std::fs::read_to_string(&p) {
            return serde_json::from_str(&text).expect("golden JSON parses");
        }
    }
    panic!(
        "golden file {name} not found (shared/golden beside the repository, or PAGODA_GOLDEN_DIR)"
    );
}

pub fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .expect("id array")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}
