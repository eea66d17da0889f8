//! The disk tier's two threads. The writer takes evicted blocks off its bounded queue, makes
//! room under the size budget (deleting least recently used files), writes a temp file and
//! renames it into place (a reader never sees half a file); a full disk turns the tier off.
//! The reader reads a request's blocks in order, checking each file whole, and stops at the
//! first missing or unsound one (deleted): the blocks before it are still a valid prefix.

use std::fs;
use std::io::Write;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Receiver;
use std::time::{Instant, SystemTime};

use pagoda_core::kv::{BlockHash, LoadTicket};

use super::format::{self, TMP_SUFFIX};
use super::{ReadState, Shared};

pub(super) fn write_loop(shared: &Shared, rx: Receiver<(BlockHash, Vec<u8>)>) {
    for (key, payload) in rx {
        if !shared.enabled.load(Ordering::Relaxed) {
            shared
                .counters
                .blocks_dropped
                .fetch_add(1, Ordering::Relaxed);
            continue;
        }
        if payload.len() != shared.payload_len
            || shared.index.lock().map_or(true, |ix| ix.contains(&key))
        {
            continue;
        }
        let bytes = format::encode(&shared.digest, &key, &payload);
        make_room(shared, bytes.len() as u64);
        let path = shared.path(&key);
        let tmp = path.with_extension(TMP_SUFFIX);
        let written = fs::File::create(&tmp)
            .and_then(|mut f| f.write_all(&bytes))
            .and_then(|()| fs::rename(&tmp, &path));
        match written {
            Ok(()) => {
                if let Ok(mut ix) = shared.index.lock() {
                    ix.insert(key, bytes.len() as u64);
                }
                let c = &shared.counters;
                c.blocks_written.fetch_add(1, Ordering::Relaxed);
                c.bytes_written
                    .fetch_add(bytes.len() as u64, Ordering::Relaxed);
            }
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                shared
                    .counters
                    .blocks_dropped
                    .fetch_add(1, Ordering::Relaxed);
                if e.kind() == std::io::ErrorKind::StorageFull || e.raw_os_error() == Some(28) {
                    shared.disable("the disk is full");
                } else {
                    tracing::warn!(file = %path.display(), "KV disk tier: write failed: {e}");
                }
            }
        }
    }
}

/// Deletes least recently used files until `need` more bytes fit the budget.
fn make_room(shared: &Shared, need: u64) {
    loop {
        let victim = match shared.index.lock() {
            Ok(mut ix) if ix.bytes() + need > shared.max_bytes => ix.pop_lru(),
            _ => None,
        };
        let Some(key) = victim else { return };
        let _ = fs::remove_file(shared.path(&key));
    }
}

pub(super) fn read_loop(shared: &Shared, rx: Receiver<(LoadTicket, Vec<BlockHash>)>) {
    for (ticket, keys) in rx {
        let started = Instant::now();
        let mut out = Vec::with_capacity(keys.len());
        for key in keys {
            let live = shared.reads.lock().is_ok_and(|r| r.contains_key(&ticket));
            if !live {
                break; // cancelled: its request ended
            }
            match read_one(shared, &key) {
                Some(p) => out.push((key, p)),
                None => break,
            }
        }
        let bytes = (out.len() * shared.payload_len) as u64;
        let secs = started.elapsed().as_secs_f64();
        if bytes >= 1 << 20 && secs > 0.0 {
            // Later decisions use what reads really cost here (page cache or device).
            let old = f64::from_bits(shared.read_bps.load(Ordering::Relaxed));
            let new = 0.5 * old + 0.5 * bytes as f64 / secs;
            shared.read_bps.store(new.to_bits(), Ordering::Relaxed);
        }
        tracing::debug!(
            blocks = out.len(),
            mib = bytes as f64 / 1048576.0,
            ms = secs * 1e3,
            mib_per_s = bytes as f64 / 1048576.0 / secs.max(1e-9),
            "KV disk tier: read"
        );
        let c = &shared.counters;
        c.blocks_read.fetch_add(out.len() as u64, Ordering::Relaxed);
        c.bytes_read.fetch_add(bytes, Ordering::Relaxed);
        if let Ok(mut reads) = shared.reads.lock()
            && let Some(state) = reads.get_mut(&ticket)
        {
            *state = ReadState::Done(out);
        }
    }
}

/// One block's payload, checked; an unsound file is deleted and forgotten.
fn read_one(shared: &Shared, key: &BlockHash) -> Option<Vec<u8>> {
    let path = shared.path(key);
    let forget = || {
        if let Ok(mut ix) = shared.index.lock() {
            ix.remove(key);
        }
    };
    // A block file has one size: anything else (a file grown by whoever shares the
    // directory, or cut short) is deleted unread rather than read whole.
    let want = format::file_len(shared.payload_len);
    match fs::metadata(&path) {
        Ok(m) if m.len() == want => {}
        Ok(m) => {
            tracing::warn!(file = %path.display(), len = m.len(), want, "KV disk tier: deleting a block file of the wrong size");
            let _ = fs::remove_file(&path);
            forget();
            return None;
        }
        Err(_) => {
            forget(); // evicted (or removed) since it was indexed
            return None;
        }
    }
    let file = match fs::read(&path) {
        Ok(f) => f,
        Err(_) => {
            forget();
            return None;
        }
    };
    match format::decode(file, &shared.digest, key, shared.payload_len) {
        Ok(payload) => {
            if let Ok(mut ix) = shared.index.lock() {
                ix.touch(key);
            }
            // The mtime carries the LRU order across restarts.
            if let Ok(f) = fs::File::open(&path) {
                let _ = f.set_modified(SystemTime::now());
            }
            Some(payload)
        }
        Err(why) => {
            tracing::warn!(file = %path.display(), reason = ?why, "KV disk tier: deleting an unusable block file");
            let _ = fs::remove_file(&path);
            forget();
            None
        }
    }
}
