//! Writing a cache file atomically: everything goes to a temporary file in the target's
//! directory, which is then renamed over the target, so a reader sees the old file or the
//! complete new one. There is no fsync: after a crash a file whose data never reached the disk
//! fails its checksums at the next load and is rewritten, which is cheaper than making every
//! first start wait for the disk. The file is written in whole 2 MiB chunks at 2 MiB offsets,
//! so the page cache holds it in huge folios that the next load maps with huge pages.

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
        let mut out = HugeChunks::new(file);
        out.write_all(&head)?;
        let mut at = head.len();
        let zeros = [0u8; format::DATA_ALIGN];
        for ((_, m), r) in matrices.iter().zip(&ranges) {
            out.write_all(&zeros[..r.start - at])?;
            out.write_all(m.as_bytes())?;
            at = r.end;
        }
        out.finish()?;
        std::fs::rename(&tmp, path)?;
        Ok(at)
    })();
    written.map_err(|e| {
        // Best effort: the temporary file is garbage whether or not it can be removed.
        let _ = std::fs::remove_file(&tmp);
        PackCacheError::io(path)(e)
    })
}

/// Bytes of a huge page (x86-64 PMD).
const HUGE: usize = 2 << 20;

/// A writer that hands the file whole [`HUGE`] chunks at multiples of [`HUGE`] (and the rest at
/// the end). The page cache sizes a written folio by the write: 2 MiB writes at 2 MiB offsets
/// become 2 MiB folios, which a mapping maps as huge pages; smaller writes leave small folios
/// (a file written through a 1 MiB buffer was mapped with none, and Gemma 3's decode ran ~8%
/// slower from a file half in huge pages than from the packed copy in memory).
struct HugeChunks<W: Write> {
    file: W,
    /// Bytes of the chunk being filled (fewer than [`HUGE`]).
    buf: Vec<u8>,
}

impl<W: Write> HugeChunks<W> {
    fn new(file: W) -> Self {
        Self {
            file,
            buf: Vec::with_capacity(HUGE),
        }
    }

    fn write_all(&mut self, mut bytes: &[u8]) -> std::io::Result<()> {
        while !bytes.is_empty() {
            if self.buf.is_empty() && bytes.len() >= HUGE {
                // At a chunk boundary: whole chunks go straight from the caller's bytes.
                let (whole, rest) = bytes.split_at(bytes.len() / HUGE * HUGE);
                self.file.write_all(whole)?;
                bytes = rest;
                continue;
            }
            let take = (HUGE - self.buf.len()).min(bytes.len());
            self.buf.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
            if self.buf.len() == HUGE {
                self.file.write_all(&self.buf)?;
                self.buf.clear();
            }
        }
        Ok(())
    }

    /// Writes the last, partial chunk; returns the file.
    fn finish(mut self) -> std::io::Result<W> {
        self.file.write_all(&self.buf)?;
        self.file.flush()?;
        Ok(self.file)
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Records the (offset, length) of every write it is given.
    #[derive(Default)]
    struct Recorder {
        bytes: Vec<u8>,
        writes: Vec<(usize, usize)>,
    }

    impl Write for Recorder {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.writes.push((self.bytes.len(), b.len()));
            self.bytes.extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn the_file_gets_whole_aligned_huge_chunks_and_the_same_bytes() {
        let pieces: Vec<Vec<u8>> = [88, 4008, 3 * HUGE + 17, 100, HUGE, 5, 2 * HUGE - 3]
            .iter()
            .enumerate()
            .map(|(i, &n)| (0..n).map(|j| (i * 31 + j * 7) as u8).collect())
            .collect();
        let mut out = HugeChunks::new(Recorder::default());
        for p in &pieces {
            out.write_all(p).unwrap_or_else(|e| panic!("{e}"));
        }
        let total: usize = pieces.iter().map(Vec::len).sum();
        let file = out.finish().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(file.bytes, pieces.concat());
        let (last, whole) = file
            .writes
            .split_last()
            .unwrap_or_else(|| panic!("no writes"));
        for &(at, len) in whole {
            assert!(
                at % HUGE == 0 && len % HUGE == 0 && len > 0,
                "write of {len} at {at}"
            );
        }
        assert_eq!(last.0 + last.1, total);
    }
}
