//! The names and types of a Prometheus text exposition, checked against a list kept in a
//! crate's tests/fixtures/: scrapers (Prometheus, the Inference Extension, llm-d) read these
//! names, so a family renamed, retyped or dropped must show up as a failing test.

use std::collections::BTreeSet;
use std::path::Path;

/// Set to rewrite the fixture from what the test saw, after a deliberate change.
pub const BLESS_VAR: &str = "PAGODA_BLESS_METRICS";

/// `name type` for each `# TYPE` line and `name` for each sample, sorted (so the listing does
/// not depend on the order of families). Errs on a family declared twice.
pub fn listing(text: &str) -> Result<BTreeSet<String>, String> {
    let mut out = BTreeSet::new();
    for line in text.lines() {
        if let Some(t) = line.strip_prefix("# TYPE ") {
            if !out.insert(t.to_owned()) {
                return Err(format!("`{t}` declared twice"));
            }
        } else if !line.starts_with('#') && !line.is_empty() {
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            out.insert(line[..end].to_owned());
        }
    }
    Ok(out)
}

/// Compares the listing of `text` with the fixture at `path` (one entry a line); with
/// `PAGODA_BLESS_METRICS` set, writes the fixture instead. The error names what is missing
/// and what is new.
pub fn check(text: &str, path: &Path) -> Result<(), String> {
    let got = listing(text)?;
    if std::env::var_os(BLESS_VAR).is_some() {
        let body: String = got.iter().map(|l| format!("{l}\n")).collect();
        return std::fs::write(path, body).map_err(|e| format!("{}: {e}", path.display()));
    }
    let want: BTreeSet<String> = std::fs::read_to_string(path)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .lines()
        .map(str::to_owned)
        .collect();
    let missing: Vec<_> = want.difference(&got).collect();
    let new: Vec<_> = got.difference(&want).collect();
    if missing.is_empty() && new.is_empty() {
        return Ok(());
    }
    Err(format!(
        "the exposition differs from {}\nmissing: {missing:#?}\nnew: {new:#?}\n\
         (after a deliberate change, rerun with {BLESS_VAR}=1)\nwhole text:\n{text}",
        path.display()
    ))
}
