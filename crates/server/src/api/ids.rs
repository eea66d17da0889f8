//! Ids and timestamps of responses: `chatcmpl-...`, `msg_...`, `resp_...`, `call_...` ids
//! unique within the process, and `created` seconds.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Unix seconds now (`created`).
pub fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A response id: prefix, then 24 hex digits unique within the process and unlikely to repeat
/// across restarts (the clock seeds it).
pub fn random_id(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    format!("{prefix}-{t:016x}{n:08x}")
}
