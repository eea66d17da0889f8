//! The pack cache: the kernels' packed layout of a model's weights ([`PackedMatrix`]), kept in a
//! file beside the model and memory-mapped at the next load instead of repacking (which reads
//! and rewrites every weight: 0.9 s and more for Qwen2.5-Coder 0.5B). A load runs one
//! [`PackSession`]: `Weights::packed` looks each matrix up in it and records what it packed;
//! at the end the session writes a new file when anything had to be packed.
//!
//! A file is used only when its key matches (the model file's size, mtime and inode, and the
//! fingerprint of the layout this build packs on this CPU), its header, index and every
//! matrix's checksum are intact, and each matrix has the type, shape and length asked for.
//! Anything else is a miss: the weights are packed as without a cache and the file rewritten
//! (written to a temporary file in the same directory, then renamed over). A failure to write
//! is logged once and costs only the next start-up.

pub(crate) mod checksum;
mod format;
mod location;
mod read;
mod write;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Instant, UNIX_EPOCH};

use pagoda_gguf::GgufFile;
use pagoda_kernels::quant::GgmlType;
use pagoda_kernels::quant::packed::{PackedMatrix, layout_fingerprint};
use thiserror::Error;

use format::CacheKey;
pub use location::{CACHE_SUFFIX, PackCache};
use read::Mapped;

/// Why a cache file was not used. Never reaches the caller of a load: it becomes a
/// [`CacheMiss`] or a log line, and the weights are packed.
#[derive(Debug, Error)]
pub(crate) enum PackCacheError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A sound cache for another model file, layout or format version.
    #[error("stale: {0}")]
    Stale(String),
    /// Not a sound cache file: truncated, damaged, or not one at all.
    #[error("invalid: {0}")]
    Invalid(String),
}

impl PackCacheError {
    fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Self + '_ {
        move |source| Self::Io {
            path: path.to_owned(),
            source,
        }
    }
}

/// Why a load packed its weights instead of mapping them from a cache file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CacheMiss {
    /// There was no cache file.
    Absent,
    /// The cache file was made for another model file, build or CPU.
    Stale,
    /// The cache file was truncated, damaged or not a cache file (the reason).
    Invalid(String),
    /// The cache file held some of the matrices but not all of them.
    Partial,
}

/// What the pack cache did during a load.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PackCacheStatus {
    /// Turned off, or the model was loaded without a path.
    Off,
    /// Nothing is packed on this CPU (or in this model), so there is nothing to cache.
    NotNeeded,
    /// Every packed matrix was mapped from this file.
    Hit(PathBuf),
    /// The weights were packed and written to this file for the next load.
    Written { path: PathBuf, miss: CacheMiss },
    /// The weights were packed; no cache file could be written (the reason, also logged).
    NotWritten { miss: CacheMiss, reason: String },
    /// The model file could not be identified (the reason): no cache was read or written.
    Unavailable(String),
}

/// One load's use of the cache: the file found (if any) and the matrices packed so far.
pub(crate) struct PackSession {
    mode: Mode,
    recorded: Mutex<Recorded>,
}

enum Mode {
    /// No cache is read or written; the status to report.
    Inactive(PackCacheStatus),
    Active {
        key: CacheKey,
        model: PathBuf,
        candidates: Vec<PathBuf>,
        found: Option<Mapped>,
        miss: CacheMiss,
    },
}

#[derive(Default)]
struct Recorded {
    /// Every packed matrix of the model by name, in load order (what a new file holds).
    matrices: Vec<(String, Arc<PackedMatrix>)>,
    /// How many of them were packed rather than found.
    packed: usize,
}

impl PackSession {
    /// A session that caches nothing.
    pub(crate) fn off() -> Self {
        Self::inactive(PackCacheStatus::Off)
    }

    fn inactive(status: PackCacheStatus) -> Self {
        Self {
            mode: Mode::Inactive(status),
            recorded: Mutex::default(),
        }
    }

    /// Looks for a usable cache of the model at `path` (open as `file`) where `cache` says.
    pub(crate) fn open(path: &Path, file: &GgufFile, cache: &PackCache) -> Self {
        let candidates = cache.candidates(path);
        if candidates.is_empty() {
            return Self::off();
        }
        let Some(layout) = layout_fingerprint() else {
            return Self::inactive(PackCacheStatus::NotNeeded);
        };
        let key = match model_key(path, layout) {
            Ok(k) if k.model_len == file.file_len() => k,
            Ok(_) => {
                let reason = "the model file changed since it was opened".to_owned();
                tracing::warn!("packed-weight cache unused: {reason}");
                return Self::inactive(PackCacheStatus::Unavailable(reason));
            }
            Err(e) => {
                tracing::warn!("packed-weight cache unused: {e}");
                return Self::inactive(PackCacheStatus::Unavailable(e.to_string()));
            }
        };
        let started = Instant::now();
        let mut miss = CacheMiss::Absent;
        let mut found = None;
        for candidate in &candidates {
            match read::open(candidate, &key) {
                Ok(Some(mapped)) => {
                    tracing::info!(
                        "packed weights mapped from {} ({:.1} MiB, {} matrices, checked in {:.0} ms)",
                        candidate.display(),
                        mapped.len() as f64 / 1048576.0,
                        mapped.entries(),
                        started.elapsed().as_secs_f64() * 1e3
                    );
                    found = Some(mapped);
                    break;
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::info!("packed-weight cache {} not used: {e}", candidate.display());
                    if miss == CacheMiss::Absent {
                        miss = match e {
                            PackCacheError::Stale(_) => CacheMiss::Stale,
                            e => CacheMiss::Invalid(e.to_string()),
                        };
                    }
                }
            }
        }
        Self {
            mode: Mode::Active {
                key,
                model: path.to_owned(),
                candidates,
                found,
                miss,
            },
            recorded: Mutex::default(),
        }
    }

    /// The matrix `name` (`rows` x `cols` of `ty`) from the cache file, if it holds it.
    pub(crate) fn lookup(
        &self,
        name: &str,
        ty: GgmlType,
        rows: usize,
        cols: usize,
    ) -> Option<Arc<PackedMatrix>> {
        let Mode::Active {
            found: Some(found), ..
        } = &self.mode
        else {
            return None;
        };
        found.matrix(name, ty, rows, cols).map(Arc::new)
    }

    /// Notes that `matrix` is `name`'s packed form, `found` in the cache or packed now.
    pub(crate) fn record(&self, name: &str, matrix: &Arc<PackedMatrix>, found: bool) {
        if matches!(self.mode, Mode::Inactive(_)) {
            return;
        }
        // A poisoned lock means a panic in another load step, which fails the whole load.
        let mut r = self.recorded.lock().unwrap_or_else(|e| e.into_inner());
        r.matrices.push((name.to_owned(), Arc::clone(matrix)));
        r.packed += usize::from(!found);
    }

    /// Ends the load: writes a cache file if anything was packed, and says what happened.
    pub(crate) fn finish(self) -> PackCacheStatus {
        let recorded = self
            .recorded
            .into_inner()
            .unwrap_or_else(|e| e.into_inner());
        let (key, model, candidates, found, miss) = match self.mode {
            Mode::Inactive(status) => return status,
            Mode::Active {
                key,
                model,
                candidates,
                found,
                miss,
            } => (key, model, candidates, found, miss),
        };
        if recorded.matrices.is_empty() {
            return PackCacheStatus::NotNeeded;
        }
        if let Some(found) = &found
            && recorded.packed == 0
        {
            return PackCacheStatus::Hit(found.path().to_owned());
        }
        let miss = if found.is_some() {
            CacheMiss::Partial
        } else {
            miss
        };
        // Packing took a while: a model file rewritten meanwhile must not get this cache.
        if model_key(&model, key.layout).ok() != Some(key) {
            let reason = "the model file changed during the load".to_owned();
            tracing::warn!("packed-weight cache not written: {reason}");
            return PackCacheStatus::NotWritten { miss, reason };
        }
        let started = Instant::now();
        let mut errors = Vec::new();
        for path in candidates {
            match write::write(&path, &key, &recorded.matrices) {
                Ok(bytes) => {
                    tracing::info!(
                        "packed weights written to {} for the next start ({:.1} MiB in {:.0} ms; {miss:?})",
                        path.display(),
                        bytes as f64 / 1048576.0,
                        started.elapsed().as_secs_f64() * 1e3
                    );
                    return PackCacheStatus::Written { path, miss };
                }
                Err(e) => errors.push(e.to_string()),
            }
        }
        let reason = errors.join("; ");
        tracing::warn!(
            "cannot write the packed-weight cache ({reason}): the weights will be packed again at the next start (PAGODA_PACK_CACHE_DIR picks another directory, PAGODA_NO_PACK_CACHE=1 stops trying)"
        );
        PackCacheStatus::NotWritten { miss, reason }
    }
}

/// The key of the model file at `path` as it is now, for a packed layout `layout`.
fn model_key(path: &Path, layout: u64) -> Result<CacheKey, PackCacheError> {
    let meta = std::fs::metadata(path).map_err(PackCacheError::io(path))?;
    let mtime = meta
        .modified()
        .map_err(PackCacheError::io(path))?
        .duration_since(UNIX_EPOCH)
        .map_err(|_| PackCacheError::Invalid("the model file's mtime is before 1970".into()))?;
    #[cfg(unix)]
    let inode = std::os::unix::fs::MetadataExt::ino(&meta);
    #[cfg(not(unix))]
    let inode = 0;
    Ok(CacheKey {
        model_len: meta.len(),
        mtime_secs: i64::try_from(mtime.as_secs()).unwrap_or(i64::MAX),
        mtime_nanos: mtime.subsec_nanos(),
        inode,
        layout,
    })
}
