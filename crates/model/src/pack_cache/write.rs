//! Writing a cache file atomically: everything goes to a temporary file in the target's
//! directory, which is then renamed over the target, so a reader sees the old file or the
//! complete new one. There is no fsync: after a crash a file whose data never reached the disk
//! fails its checksums at the next load and is rewritten, which is cheaper than making every
//! first start wait for the disk.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use pagoda_kernels::parallel;
use pagoda_kernels::quant::packed::PackedMatrix;

use super::PackCacheError;
use super::checksum::checksum;
use super::format::{self, CacheKey, EntryMeta};

/// Writes `matrices` as the cache file `path` for `key`; returns the file's length.
pub(crate) fn write(
    path: &Path,
    key: &CacheKey,
    matrices: &[(String, Arc<PackedMatrix>)],
) -> Result<usize, PackCacheError> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(PackCacheError::io(dir))?;
    let sums = checksums(matrices);
    let metas: Vec<EntryMeta<'_>> = matrices
        .iter()
        .zip(&sums)
        .map(|((name, m), &checksum)| EntryMeta {
            name,
            ty: m.ty(),
            rows: m.rows(),
            cols: m.cols(),
            len: m.len_bytes(),
            checksum,
        })
        .collect();
    let (head, ranges) = format::layout(key, &metas);
    let tmp = temp_path(path);
    let written = (|| {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
        out.write_all(&head)?;
        let mut at = head.len();
        let zeros = [0u8; format::DATA_ALIGN];
        for ((_, m), r) in matrices.iter().zip(&ranges) {
            out.write_all(&zeros[..r.start - at])?;
            out.write_all(m.as_bytes())?;
            at = r.end;
        }
        out.into_inner().map_err(|e| e.into_error())?;
        std::fs::rename(&tmp, path)?;
        Ok(at)
    })();
    written.map_err(|e| {
        // Best effort: the temporary file is garbage whether or not it can be removed.
        let _ = std::fs::remove_file(&tmp);
        PackCacheError::io(path)(e)
    })
}

/// Every matrix's checksum, computed in parallel, the largest first so the last task is a
/// small one.
fn checksums(matrices: &[(String, Arc<PackedMatrix>)]) -> Vec<u64> {
    let sums: Vec<AtomicU64> = matrices.iter().map(|_| AtomicU64::new(0)).collect();
    let mut order: Vec<usize> = (0..matrices.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(matrices[i].1.len_bytes()));
    parallel::run(order.len(), &|task| {
        let i = order[task];
        sums[i].store(checksum(matrices[i].1.as_bytes()), Ordering::Relaxed);
    });
    sums.into_iter().map(|s| s.into_inner()).collect()
}

/// `.<name>.tmp-<pid>-<n>` beside `path`: unique to this process and write, hidden, and on
/// the target's file system so the rename is atomic.
fn temp_path(path: &Path) -> std::path::PathBuf {
    static WRITES: AtomicUsize = AtomicUsize::new(0);
    let n = WRITES.fetch_add(1, Ordering::Relaxed);
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    path.with_file_name(format!(".{name}.tmp-{}-{n}", std::process::id()))
}
