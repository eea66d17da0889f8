//! `--models-dir`: every GGUF file and Hugging Face checkpoint directory in one folder, each
//! served under its name (a file's stem, a directory's name); found again on SIGHUP, when
//! models added since are served too.

use std::path::{Path, PathBuf};

/// The models in `dir`, sorted by name; unreadable entries are skipped.
pub fn scan(dir: &Path) -> std::io::Result<Vec<(String, PathBuf)>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir)?.flatten() {
        let path = entry.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        // Half-written downloads and pagoda's own sidecars are not models.
        if name.starts_with('.') || name.ends_with(".partial") {
            continue;
        }
        if path.is_dir() {
            if pagoda_hf::is_checkpoint_dir(&path) {
                found.push((name.to_owned(), path));
            }
        } else if let Some(stem) = name.strip_suffix(".gguf") {
            found.push((stem.to_owned(), path));
        }
    }
    found.sort();
    Ok(found)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn gguf_files_and_checkpoint_directories_are_found_and_nothing_else() {
        let dir = std::env::temp_dir().join(format!("pagoda-models-dir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("bert")).unwrap();
        std::fs::write(dir.join("bert/config.json"), "{}").unwrap();
        std::fs::create_dir_all(dir.join("notes")).unwrap();
        for f in [
            "a.gguf",
            "a.gguf.sha256",
            "a.gguf.pagoda-packed",
            "x.gguf.partial",
            "readme",
        ] {
            std::fs::write(dir.join(f), "").unwrap();
        }
        let names: Vec<String> = scan(&dir).unwrap().into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["a", "bert"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
