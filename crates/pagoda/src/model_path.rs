//! Where models live: `$PAGODA_MODEL_DIR`, else `~/.cache/pagoda/models`, the directory that
//! `scripts/fetch-models.sh` fills. The default model is Qwen2.5-Coder-0.5B-Instruct (Q4_K_M): it answers
//! questions sensibly, where SmolLM2-135M (kept for the speed benchmarks) rambles.

use std::path::PathBuf;

/// File name of the default model inside the model directory.
pub const DEFAULT_MODEL_FILE: &str = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf";

/// The model directory.
pub fn model_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("PAGODA_MODEL_DIR") {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    home.join(".cache").join("pagoda").join("models")
}

/// The model to load: the user's path, or the default model, which must have been fetched.
pub fn resolve(model: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    if let Some(path) = model {
        return Ok(path);
    }
    let path = model_dir().join(DEFAULT_MODEL_FILE);
    if !path.exists() {
        anyhow::bail!(
            "the default model is not at {}: run scripts/fetch-models.sh (or pass --model PATH)",
            path.display()
        );
    }
    Ok(path)
}
