//! The in-memory index of the block files on disk: key -> size and last use, in LRU order,
//! with the bytes held. Rebuilt at start-up by scanning the directory (headers only, oldest
//! modification first, so the LRU order survives a restart: reads touch a file's mtime).

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::io::Read;
use std::path::Path;

use pagoda_core::kv::BlockHash;

use super::format::{self, Bad, HEADER_LEN};

#[derive(Clone, Copy, Debug)]
struct Entry {
    bytes: u64,
    /// The index clock when the block was last written or read.
    used: u64,
}

/// Block files on disk, LRU by last use.
#[derive(Debug, Default)]
pub(crate) struct Index {
    entries: HashMap<BlockHash, Entry>,
    by_use: BTreeMap<u64, BlockHash>,
    clock: u64,
    bytes: u64,
}

/// What a start-up scan found.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct ScanReport {
    pub kept: usize,
    /// Corrupt, truncated or foreign block files, and temporary files of torn writes, deleted.
    pub deleted: usize,
}

impl Index {
    pub fn contains(&self, key: &BlockHash) -> bool {
        self.entries.contains_key(key)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Adds (or refreshes) `key` as the most recently used.
    pub fn insert(&mut self, key: BlockHash, bytes: u64) {
        self.remove(&key);
        self.clock += 1;
        self.entries.insert(
            key,
            Entry {
                bytes,
                used: self.clock,
            },
        );
        self.by_use.insert(self.clock, key);
        self.bytes += bytes;
    }

    /// Marks `key` used now.
    pub fn touch(&mut self, key: &BlockHash) {
        if let Some(e) = self.entries.get(key).copied() {
            self.insert(*key, e.bytes);
        }
    }

    pub fn remove(&mut self, key: &BlockHash) -> bool {
        match self.entries.remove(key) {
            Some(e) => {
                self.by_use.remove(&e.used);
                self.bytes -= e.bytes;
                true
            }
            None => false,
        }
    }

    /// Takes the least recently used key out.
    pub fn pop_lru(&mut self) -> Option<BlockHash> {
        let (_, key) = self.by_use.pop_first()?;
        if let Some(e) = self.entries.remove(&key) {
            self.bytes -= e.bytes;
        }
        Some(key)
    }

    /// Indexes every sound block file of `dir` for `digest` and payloads of `payload_len`
    /// bytes; deletes unsound ones and leftover temporary files. Other files are left alone.
    pub fn scan(
        dir: &Path,
        digest: &[u8; 32],
        payload_len: usize,
    ) -> std::io::Result<(Self, ScanReport)> {
        let mut found = Vec::new();
        let mut report = ScanReport::default();
        for entry in fs::read_dir(dir)? {
            let Ok(entry) = entry else { continue };
            let path = entry.path();
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            if name.ends_with(&format!(".{}", format::TMP_SUFFIX)) {
                // A write cut off (the server was killed): the block was never renamed in.
                tracing::warn!(file = %path.display(), "KV disk tier: deleting a partial block file");
                if fs::remove_file(&path).is_ok() {
                    report.deleted += 1;
                }
                continue;
            }
            if !name.ends_with(&format!(".{}", format::SUFFIX)) {
                continue;
            }
            let verdict = match format::key_of_name(name) {
                Some(key) => read_header(&path, digest, &key, payload_len).map(|m| (key, m)),
                None => Err(Bad::NotABlock),
            };
            match verdict {
                Ok((key, mtime)) => found.push((mtime, key)),
                Err(why) => {
                    tracing::warn!(file = %path.display(), reason = ?why, "KV disk tier: deleting an unusable block file");
                    if fs::remove_file(&path).is_ok() {
                        report.deleted += 1;
                    }
                }
            }
        }
        found.sort_unstable();
        let mut index = Self::default();
        for (_, key) in found {
            index.insert(key, format::file_len(payload_len));
        }
        report.kept = index.len();
        Ok((index, report))
    }
}

/// Checks the header of block file `path`; its modification time when sound.
fn read_header(
    path: &Path,
    digest: &[u8; 32],
    key: &BlockHash,
    payload_len: usize,
) -> Result<std::time::SystemTime, Bad> {
    let mut f = fs::File::open(path).map_err(|_| Bad::Truncated)?;
    let meta = f.metadata().map_err(|_| Bad::Truncated)?;
    let mut header = [0u8; HEADER_LEN];
    let mut n = 0;
    while n < HEADER_LEN {
        match f.read(&mut header[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(_) => return Err(Bad::Truncated),
        }
    }
    format::check_header(&header[..n], meta.len(), digest, key, payload_len)?;
    Ok(meta.modified().unwrap_or(std::time::UNIX_EPOCH))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lru_order_and_bytes() {
        let mut ix = Index::default();
        let k = |i: u8| BlockHash([i; 32]);
        ix.insert(k(1), 10);
        ix.insert(k(2), 10);
        ix.insert(k(3), 10);
        ix.touch(&k(1));
        assert_eq!(ix.bytes(), 30);
        assert_eq!(ix.pop_lru(), Some(k(2)));
        assert_eq!(ix.pop_lru(), Some(k(3)));
        assert!(ix.remove(&k(1)));
        assert_eq!((ix.len(), ix.bytes()), (0, 0));
        assert_eq!(ix.pop_lru(), None);
    }
}
