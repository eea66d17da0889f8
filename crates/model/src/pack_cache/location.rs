//! Where pack cache files live, as the user chose through [`PackCache`]: beside the model file
//! by default (`model.gguf` → `model.gguf.pagoda-packed`), in a per-user cache directory when
//! the model's directory is not writable, or in a directory of one's choosing; or nowhere.

use std::path::{Path, PathBuf};

use super::checksum::checksum;

/// Suffix of a cache file's name.
pub const CACHE_SUFFIX: &str = ".pagoda-packed";

/// Whether and where the packed layout of a model's weights is cached between loads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PackCache {
    /// Repack at every load, read and write no cache file.
    Off,
    /// Beside the model file; when that cannot be written (or holds a cache that cannot be
    /// used), in `fallback` under a name made unique by the model's path.
    Beside { fallback: Option<PathBuf> },
    /// Only in this directory, under a name made unique by the model's path.
    In(PathBuf),
}

impl PackCache {
    /// The choice the environment makes: `PAGODA_NO_PACK_CACHE=1` turns the cache off,
    /// `PAGODA_PACK_CACHE_DIR=<dir>` keeps every cache file in `<dir>`; otherwise beside the
    /// model, falling back to `$XDG_CACHE_HOME/pagoda/packed` (or `~/.cache/pagoda/packed`).
    pub fn from_env() -> Self {
        let var = |name| std::env::var_os(name).filter(|v| !v.is_empty());
        if var("PAGODA_NO_PACK_CACHE").is_some_and(|v| v != "0") {
            return Self::Off;
        }
        if let Some(dir) = var("PAGODA_PACK_CACHE_DIR") {
            return Self::In(PathBuf::from(dir));
        }
        let cache_home = var("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| var("HOME").map(|h| PathBuf::from(h).join(".cache")));
        Self::Beside {
            fallback: cache_home.map(|d| d.join("pagoda").join("packed")),
        }
    }

    /// The cache files of the model at `model`, in the order they are read and written
    /// (`pagoda rm` deletes them with the model).
    pub fn candidates(&self, model: &Path) -> Vec<PathBuf> {
        let Some(file_name) = model.file_name() else {
            return Vec::new();
        };
        let mut beside = file_name.to_os_string();
        beside.push(CACHE_SUFFIX);
        match self {
            Self::Off => Vec::new(),
            Self::Beside { fallback } => std::iter::once(model.with_file_name(beside))
                .chain(fallback.iter().map(|d| d.join(unique_name(model))))
                .collect(),
            Self::In(dir) => vec![dir.join(unique_name(model))],
        }
    }
}

/// `<file name>-<16 hex digits of its absolute path>.pagoda-packed`: models of the same file
/// name in different directories get files of their own in a shared directory.
fn unique_name(model: &Path) -> String {
    let absolute = std::fs::canonicalize(model).unwrap_or_else(|_| model.to_owned());
    let digest = checksum(absolute.as_os_str().as_encoded_bytes());
    let name = model.file_name().unwrap_or_default().to_string_lossy();
    format!("{name}-{digest:016x}{CACHE_SUFFIX}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn beside_comes_first_then_the_fallback() {
        let model = Path::new("/models/m.gguf");
        let c = PackCache::Beside {
            fallback: Some("/home/u/.cache/pagoda/packed".into()),
        }
        .candidates(model);
        assert_eq!(c.len(), 2);
        assert_eq!(c[0], Path::new("/models/m.gguf.pagoda-packed"));
        assert_eq!(
            c[1].parent(),
            Some(Path::new("/home/u/.cache/pagoda/packed"))
        );
        let name = c[1].file_name().unwrap_or_default().to_string_lossy();
        assert!(
            name.starts_with("m.gguf-") && name.ends_with(CACHE_SUFFIX),
            "{name}"
        );
        assert_eq!(
            PackCache::Beside { fallback: None }.candidates(model).len(),
            1
        );
        assert!(PackCache::Off.candidates(model).is_empty());
    }

    #[test]
    fn models_of_one_name_in_two_directories_get_two_files_in_a_shared_dir() {
        let shared = PackCache::In("/cache".into());
        let a = shared.candidates(Path::new("/a/m.gguf"));
        let b = shared.candidates(Path::new("/b/m.gguf"));
        assert_eq!(a.len(), 1);
        assert_ne!(a, b);
        assert_eq!(a, shared.candidates(Path::new("/a/m.gguf")));
    }
}
