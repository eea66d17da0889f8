//! Where models live and what `--model` names: `$PAGODA_MODEL_DIR`, else `~/.cache/pagoda/models`,
//! holds the catalog's models (`pagoda pull`); `--model` is a path, or a catalog name
//! (`qwen2.5-coder:0.5b`, `smollm2`, ...) meaning its file there. The default model is
//! Qwen2.5-Coder-0.5B-Instruct (Q4_K_M): it answers questions sensibly, where SmolLM2-135M (kept
//! for the speed benchmarks) rambles.

use std::path::{Path, PathBuf};

use anyhow::bail;
use pagoda_frontend::Catalog;
use pagoda_frontend::catalog::Entry;

/// Catalog name of the default model.
pub const DEFAULT_MODEL: &str = "qwen2.5-coder:0.5b";

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

/// The model to load: the user's `--model` (a path or a catalog name), or the default model.
/// A catalog model that is not fetched yet is fetched when `fetch_if_missing` (`serve`, as
/// scripts/run.sh does), else the error says to run `pagoda pull`.
pub fn resolve(model: Option<PathBuf>, fetch_if_missing: bool) -> anyhow::Result<PathBuf> {
    match model {
        // An existing path wins, whatever its name; so does any non-UTF-8 one.
        Some(path) if path.exists() => Ok(path),
        Some(path) => match path.to_str() {
            Some(arg) => resolve_model(arg, fetch_if_missing),
            None => Ok(path),
        },
        None => resolve_model(DEFAULT_MODEL, fetch_if_missing),
    }
}

/// What one `--model` value names: an existing path, else a catalog name's file in the model
/// directory (fetched first when missing and `fetch_if_missing`). Anything else that looks
/// like a path is returned as it is, so the loader's error names it.
pub fn resolve_model(arg: &str, fetch_if_missing: bool) -> anyhow::Result<PathBuf> {
    let path = Path::new(arg);
    if path.exists() {
        return Ok(path.to_owned());
    }
    let catalog = Catalog::builtin();
    let Some(entry) = catalog.find(arg) else {
        if arg.contains(std::path::MAIN_SEPARATOR) || arg.ends_with(".gguf") {
            return Ok(path.to_owned());
        }
        bail!(
            "model `{arg}` is neither a file nor a catalog name (known: {})",
            catalog.names().join(", ")
        );
    };
    let local = local_path(entry);
    if local.exists() {
        return Ok(local);
    }
    if fetch_if_missing {
        crate::fetch::fetch(entry, &model_dir())?;
        return Ok(local);
    }
    bail!(
        "model `{arg}` is not fetched ({} is missing): run `pagoda pull {}`",
        local.display(),
        entry.name
    )
}

/// Where a catalog model lives in the model directory.
pub fn local_path(entry: &Entry) -> PathBuf {
    model_dir().join(&entry.path)
}

/// The catalog entry a user's name means, or an error listing the known names.
pub fn catalog_entry(name: &str) -> anyhow::Result<&'static Entry> {
    let catalog = Catalog::builtin();
    match catalog.find(name) {
        Some(e) => Ok(e),
        None => bail!(
            "unknown model `{name}` (known: {})",
            catalog.names().join(", ")
        ),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn existing_paths_win_and_catalog_names_mean_their_file() {
        // The crate's own manifest exists: taken as it is.
        let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
        assert_eq!(
            resolve_model(manifest, false).unwrap(),
            PathBuf::from(manifest)
        );
        // A path-looking argument that does not exist is left for the loader to refuse.
        assert_eq!(
            resolve_model("/nonexistent/model.gguf", false).unwrap(),
            PathBuf::from("/nonexistent/model.gguf")
        );
        let e = resolve_model("nonsense", false).unwrap_err().to_string();
        assert!(
            e.contains("nonsense") && e.contains("qwen2.5-coder:0.5b"),
            "{e}"
        );
        let entry = catalog_entry("smollm2").unwrap();
        assert_eq!(entry.name, "smollm2:135m");
        assert!(local_path(entry).ends_with("SmolLM2-135M-Instruct.Q4_1.gguf"));
        assert!(catalog_entry("smollm3").is_err());
    }
}
