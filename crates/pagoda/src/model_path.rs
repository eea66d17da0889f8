//! Where models live: `$PAGODA_MODEL_DIR`, else `~/.cache/pagoda/models`, the directory that
//! `scripts/fetch-models.sh` fills. The default model is SmolLM2-135M-Instruct (Q4_1).

use std::path::PathBuf;

/// File name of the default model inside the model directory.
pub const DEFAULT_MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

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
