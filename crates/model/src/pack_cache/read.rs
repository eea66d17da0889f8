//! Opening a cache file: map it, check its header and index against the key, and checksum
//! every matrix's bytes (in parallel: this reads the whole file, which the first decode step
//! would fault in anyway) before any of them is handed to the kernels.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use pagoda_kernels::parallel;
use pagoda_kernels::quant::GgmlType;
use pagoda_kernels::quant::packed::{PackedMatrix, SharedBytes};

use super::PackCacheError;
use super::checksum::checksum;
use super::format::{self, CacheKey, Index};

/// A checked cache file, mapped.
pub(crate) struct Mapped {
    path: PathBuf,
    map: SharedBytes,
    index: Index,
}

/// The cache file at `path` if it is sound and made for `key`; `Ok(None)` if there is none.
pub(crate) fn open(path: &Path, key: &CacheKey) -> Result<Option<Mapped>, PackCacheError> {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        // A missing directory on the way is as absent as a missing file.
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
            ) =>
        {
            return Ok(None);
        }
        Err(e) => return Err(PackCacheError::io(path)(e)),
    };
    let len = file.metadata().map_err(PackCacheError::io(path))?.len();
    if len < format::HEADER_BYTES as u64 {
        // Also keeps an empty file away from mmap, which refuses zero bytes on some platforms.
        return Err(PackCacheError::Invalid(format!("only {len} bytes")));
    }
    // SAFETY: the map is read-only. Cache files are only ever replaced by rename, never
    // rewritten in place, so the mapped inode's bytes do not change; like the GGUF mapping
    // (`GgufFile::open`), we rely on no one truncating the file while it is open.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(PackCacheError::io(path))?;
    let index = format::read_index(&map, key)?;
    // Each decode step streams every weight: ask for huge pages (where the file is not in the
    // page cache, it is then read in 2 MiB folios). The checksums read every byte, and
    // populating the page tables in one call is cheaper than faulting them in page by page.
    // Advice only: older kernels refuse either.
    #[cfg(target_os = "linux")]
    {
        let _ = map.advise(memmap2::Advice::HugePage);
        let _ = map.advise(memmap2::Advice::PopulateRead);
    }
    verify(&map, &index)?;
    Ok(Some(Mapped {
        path: path.to_owned(),
        map: Arc::new(map),
        index,
    }))
}

/// Checks every entry's checksum, the largest first so the last task is a small one.
fn verify(bytes: &[u8], index: &Index) -> Result<(), PackCacheError> {
    let mut entries: Vec<_> = index.entries.iter().collect();
    entries.sort_by_key(|(_, e)| std::cmp::Reverse(e.range.len()));
    let bad = AtomicUsize::new(usize::MAX);
    parallel::run(entries.len(), &|i| {
        let (_, e) = entries[i];
        if checksum(&bytes[e.range.clone()]) != e.checksum {
            bad.store(i, Ordering::Relaxed);
        }
    });
    if let Some((name, _)) = entries.get(bad.into_inner()) {
        return Err(PackCacheError::Invalid(format!(
            "data checksum mismatch in `{name}`"
        )));
    }
    Ok(())
}

impl Mapped {
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes of the file.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// Matrices the file holds.
    pub(crate) fn entries(&self) -> usize {
        self.index.entries.len()
    }

    /// `name`'s packed matrix, borrowed from the map, if the file holds one of this type,
    /// shape and the length this build packs it to.
    pub(crate) fn matrix(
        &self,
        name: &str,
        ty: GgmlType,
        rows: usize,
        cols: usize,
    ) -> Option<PackedMatrix> {
        let e = self.index.entries.get(name)?;
        if (e.ty, e.rows, e.cols) != (ty, rows, cols) {
            return None;
        }
        PackedMatrix::from_shared(ty, rows, cols, Arc::clone(&self.map), e.range.clone())
    }
}
