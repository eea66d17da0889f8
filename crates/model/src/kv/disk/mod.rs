//! The disk tier of the prefix cache (`--kv-disk-dir DIR --kv-disk-size 20GiB`): full blocks
//! evicted from memory are copied out by the executor into a bounded queue (full: the write
//! is dropped and counted) and written by the `pagoda-kv-disk-writer` thread as immutable
//! files (`format.rs`, temp name then rename), keyed by the block's group key; a header digest
//! of the model file, KV dtype, block size and layer layout makes another model's files
//! foreign. The index (`index.rs`) is rebuilt by scanning the directory at start-up, bounded
//! by `--kv-disk-size` with LRU by last use. Reads run on `pagoda-kv-disk-reader` for a
//! waiting request (`pagoda_core::KvTier`), only when reading is estimated faster than
//! recomputing: bytes / read throughput (measured on every read, starting from
//! `DEFAULT_READ_BYTES_PER_SEC`) against tokens / prefill throughput (timed once at start-up).
//! A lock file refuses a second server on the directory; a full disk turns the tier off.

mod block_bytes;
mod format;
mod index;
mod io;

use std::collections::HashMap;
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Sender, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use pagoda_core::kv::{BlockHash, KvGroup, KvTier, KvTierStats, LoadTicket};
use thiserror::Error;

use crate::KvCache;
use index::Index;

/// Read throughput assumed until the first read is timed: a conservative figure for a local
/// SSD (the page cache is several times faster; see docs/benchmarks.md).
pub const DEFAULT_READ_BYTES_PER_SEC: f64 = 1.0e9;
/// Name of the lock file in the directory.
pub const LOCK_FILE: &str = "pagoda-kv.lock";
/// Most bytes of evicted blocks queued for the writer at once.
const QUEUE_BYTES: usize = 256 << 20;

/// Where and how big the disk tier is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvDiskConfig {
    pub dir: PathBuf,
    /// Bytes of block files kept at most (LRU beyond).
    pub max_bytes: u64,
    /// The model file's identity (path name, size, mtime), part of every file's digest.
    pub model_identity: String,
    /// Overrides of the cost model (tests; `None`: measured).
    pub read_bytes_per_sec: Option<u64>,
    pub prefill_tokens_per_sec: Option<u64>,
}

/// Why the disk tier cannot start.
#[derive(Debug, Error)]
pub enum KvDiskError {
    #[error("--kv-disk-dir {}: {source}", dir.display())]
    Io {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "--kv-disk-dir {} is in use by another pagoda server (it holds {}); give each server its own directory",
        dir.display(),
        LOCK_FILE
    )]
    Locked { dir: PathBuf },
}

/// What a read started by `prefetch` has produced.
enum ReadState {
    Pending,
    Done(Vec<(BlockHash, Vec<u8>)>),
}

/// Counters shared by the threads.
#[derive(Default)]
struct Counters {
    hits: AtomicU64,
    misses: AtomicU64,
    blocks_written: AtomicU64,
    blocks_read: AtomicU64,
    blocks_dropped: AtomicU64,
    bytes_written: AtomicU64,
    bytes_read: AtomicU64,
}

/// State the engine thread and the tier's threads share.
struct Shared {
    dir: PathBuf,
    digest: [u8; 32],
    payload_len: usize,
    max_bytes: u64,
    enabled: AtomicBool,
    index: Mutex<Index>,
    reads: Mutex<HashMap<LoadTicket, ReadState>>,
    counters: Counters,
    /// f64 bits: bytes per second of reads so far.
    read_bps: AtomicU64,
    prefill_tps: f64,
    /// Held (and locked) for the life of the tier.
    _lock: File,
}

impl Shared {
    fn path(&self, key: &BlockHash) -> PathBuf {
        self.dir.join(format::file_name(key))
    }

    /// Turns the tier off for the rest of this run (serving goes on without it).
    fn disable(&self, why: &str) {
        if self.enabled.swap(false, Ordering::Relaxed) {
            tracing::warn!(dir = %self.dir.display(), "KV disk tier turned off: {why}");
        }
    }
}

/// The disk tier: an index, a writer thread and a reader thread over one directory.
pub struct DiskTier {
    shared: Arc<Shared>,
    writes: Option<SyncSender<(BlockHash, Vec<u8>)>>,
    reads: Option<Sender<(LoadTicket, Vec<BlockHash>)>>,
    next_ticket: AtomicU64,
    threads: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for DiskTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskTier")
            .field("dir", &self.shared.dir)
            .field("enabled", &self.shared.enabled.load(Ordering::Relaxed))
            .finish()
    }
}

impl DiskTier {
    /// Opens (creating) `config.dir` for blocks of `kv`'s layout over `groups`: takes the lock,
    /// scans and trims the store, starts the threads. `prefill_tps` is the measured prefill
    /// throughput (tokens per second) unless the config overrides it.
    pub fn open(
        config: &KvDiskConfig,
        kv: &KvCache,
        groups: &[KvGroup],
        prefill_tps: f64,
    ) -> Result<Self, KvDiskError> {
        let dir = config.dir.clone();
        let io_err = |source| KvDiskError::Io {
            dir: dir.clone(),
            source,
        };
        fs::create_dir_all(&dir).map_err(io_err)?;
        let lock = lock_dir(&dir)?;
        let digest = kv.layout_digest("kv-disk", format::VERSION, &config.model_identity, groups);
        let payload_len = kv.block_payload_len();
        let (mut index, report) = Index::scan(&dir, &digest, payload_len).map_err(io_err)?;
        let file_len = format::file_len(payload_len);
        let fits = file_len <= config.max_bytes;
        while index.bytes() > config.max_bytes {
            let Some(key) = index.pop_lru() else { break };
            let _ = fs::remove_file(dir.join(format::file_name(&key)));
        }
        tracing::info!(
            dir = %dir.display(),
            blocks = index.len(),
            mib = index.bytes() as f64 / 1048576.0,
            deleted = report.deleted,
            block_bytes = file_len,
            "KV disk tier: index rebuilt"
        );
        let read_bps = config
            .read_bytes_per_sec
            .map_or(DEFAULT_READ_BYTES_PER_SEC, |b| b as f64);
        let shared = Arc::new(Shared {
            dir,
            digest,
            payload_len,
            max_bytes: config.max_bytes,
            enabled: AtomicBool::new(true),
            index: Mutex::new(index),
            reads: Mutex::new(HashMap::new()),
            counters: Counters::default(),
            read_bps: AtomicU64::new(read_bps.to_bits()),
            prefill_tps: config
                .prefill_tokens_per_sec
                .map_or(prefill_tps, |t| t as f64)
                .max(1e-9),
            _lock: lock,
        });
        if !fits {
            shared.disable(&format!(
                "--kv-disk-size {} bytes cannot hold one block file of {file_len} bytes",
                config.max_bytes
            ));
        }
        let (wtx, wrx) = mpsc::sync_channel((QUEUE_BYTES / payload_len.max(1)).max(4));
        let (rtx, rrx) = mpsc::channel();
        let spawn = |name: &str, f: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new()
                .name(name.into())
                .spawn(f)
                .map_err(|source| KvDiskError::Io {
                    dir: config.dir.clone(),
                    source,
                })
        };
        let (s1, s2) = (Arc::clone(&shared), Arc::clone(&shared));
        let threads = vec![
            spawn(
                "pagoda-kv-disk-writer",
                Box::new(move || io::write_loop(&s1, wrx)),
            )?,
            spawn(
                "pagoda-kv-disk-reader",
                Box::new(move || io::read_loop(&s2, rrx)),
            )?,
        ];
        Ok(Self {
            shared,
            writes: Some(wtx),
            reads: Some(rtx),
            next_ticket: AtomicU64::new(1),
            threads,
        })
    }

    /// Bytes of one block's payload.
    pub fn payload_len(&self) -> usize {
        self.shared.payload_len
    }

    /// Queues an evicted block's bytes for writing; drops (and counts) it when the queue is
    /// full or the tier is off. Never waits.
    pub fn save(&self, key: BlockHash, payload: Vec<u8>) {
        let dropped = !self.shared.enabled.load(Ordering::Relaxed)
            || match &self.writes {
                Some(tx) => matches!(
                    tx.try_send((key, payload)),
                    Err(TrySendError::Full(_) | TrySendError::Disconnected(_))
                ),
                None => true,
            };
        if dropped {
            self.shared
                .counters
                .blocks_dropped
                .fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Queues a block for writing, waiting for room (shutdown's flush).
    pub fn save_blocking(&self, key: BlockHash, payload: Vec<u8>) {
        if self.shared.enabled.load(Ordering::Relaxed)
            && let Some(tx) = &self.writes
        {
            let _ = tx.send((key, payload));
        }
    }

    /// The blocks read for `ticket` (empty unless its read finished), forgetting it.
    pub fn take_read(&self, ticket: LoadTicket) -> Vec<(BlockHash, Vec<u8>)> {
        let Ok(mut reads) = self.shared.reads.lock() else {
            return Vec::new();
        };
        match reads.remove(&ticket) {
            Some(ReadState::Done(v)) => v,
            Some(ReadState::Pending) => {
                reads.insert(ticket, ReadState::Pending);
                Vec::new()
            }
            None => Vec::new(),
        }
    }

    /// Waits until every queued write is on disk and stops the threads.
    pub fn close(&mut self) {
        self.writes = None;
        self.reads = None;
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for DiskTier {
    fn drop(&mut self) {
        self.close();
    }
}

impl KvTier for DiskTier {
    fn enabled(&self) -> bool {
        self.shared.enabled.load(Ordering::Relaxed)
    }

    fn contains(&self, key: &BlockHash) -> bool {
        self.shared
            .index
            .lock()
            .map(|ix| ix.contains(key))
            .unwrap_or(false)
    }

    fn worth_reading(&self, blocks: usize, tokens: usize) -> bool {
        let bps = f64::from_bits(self.shared.read_bps.load(Ordering::Relaxed)).max(1.0);
        let read = (blocks * self.shared.payload_len) as f64 / bps;
        let compute = tokens as f64 / self.shared.prefill_tps;
        self.enabled() && read < compute
    }

    fn prefetch(&self, keys: Vec<BlockHash>) -> LoadTicket {
        let ticket = self.next_ticket.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut reads) = self.shared.reads.lock() {
            reads.insert(ticket, ReadState::Pending);
        }
        let sent = self
            .reads
            .as_ref()
            .is_some_and(|tx| tx.send((ticket, keys)).is_ok());
        if !sent && let Ok(mut reads) = self.shared.reads.lock() {
            reads.insert(ticket, ReadState::Done(Vec::new()));
        }
        ticket
    }

    fn poll(&self, ticket: LoadTicket) -> Option<usize> {
        let reads = self.shared.reads.lock().ok()?;
        match reads.get(&ticket) {
            Some(ReadState::Pending) => None,
            Some(ReadState::Done(v)) => Some(v.len()),
            None => Some(0),
        }
    }

    fn cancel(&self, ticket: LoadTicket) {
        if let Ok(mut reads) = self.shared.reads.lock() {
            reads.remove(&ticket);
        }
    }

    fn stats(&self) -> KvTierStats {
        let c = &self.shared.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let (blocks_stored, bytes_stored) = self
            .shared
            .index
            .lock()
            .map(|ix| (ix.len() as u64, ix.bytes()))
            .unwrap_or_default();
        KvTierStats {
            enabled: self.enabled(),
            hits: get(&c.hits),
            misses: get(&c.misses),
            blocks_written: get(&c.blocks_written),
            blocks_read: get(&c.blocks_read),
            blocks_dropped: get(&c.blocks_dropped),
            bytes_written: get(&c.bytes_written),
            bytes_read: get(&c.bytes_read),
            blocks_stored,
            bytes_stored,
        }
    }

    fn record_lookup(&self, hit: usize, miss: usize) {
        let c = &self.shared.counters;
        c.hits.fetch_add(hit as u64, Ordering::Relaxed);
        c.misses.fetch_add(miss as u64, Ordering::Relaxed);
    }
}

/// Takes the directory's lock file (released when the process ends, even by a crash).
fn lock_dir(dir: &Path) -> Result<File, KvDiskError> {
    let path = dir.join(LOCK_FILE);
    let file = File::options()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|source| KvDiskError::Io {
            dir: dir.to_owned(),
            source,
        })?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(fs::TryLockError::WouldBlock) => Err(KvDiskError::Locked {
            dir: dir.to_owned(),
        }),
        Err(fs::TryLockError::Error(source)) => Err(KvDiskError::Io {
            dir: dir.to_owned(),
            source,
        }),
    }
}

/// `--kv-disk-dir`'s default model identity for a model at `path`: its file name, size and
/// modification time (a re-downloaded or edited file is another model).
pub fn model_identity(path: &Path) -> String {
    let meta = fs::metadata(path).ok();
    let mtime = meta
        .as_ref()
        .and_then(|m| m.modified().ok())
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    format!(
        "{} size {} mtime {mtime}",
        path.file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
        meta.map_or(0, |m| m.len())
    )
}
