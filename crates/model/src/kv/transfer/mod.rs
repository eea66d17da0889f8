//! Prefill/decode disaggregation's byte path (`pagoda serve --kv-role prefill|decode`): a
//! prefill replica's runner copies a finished request's prompt blocks out
//! (`SchedulerOutput::kv_sends`) and `KvSender` ships them over TCP (`frame.rs`) to the decode
//! replica named in its `kv_transfer_params`; there `TransferStore` receives them on
//! `--kv-transfer-port` and is the engine's lower KV tier, so imported blocks come in as
//! computed blocks the way the disk tier's read-back does (a prefix hit, `cached_tokens`).
//! With a shared secret (`auth.rs`) both ends authenticate and every frame is MAC'd.

mod auth;
mod frame;

/// Every frame's first four bytes, and the authenticating sender's opening message's (a
/// receiver tells which kind of peer it has from them).
const FRAME_MAGIC: &[u8; 4] = b"PGKX";
const HELLO_MAGIC: &[u8; 4] = b"PGKH";
mod sender;
mod store;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use pagoda_core::kv::{KvGroup, KvRole};

pub use auth::{AuthError, KvSecret, Seal, SecretError};
pub use frame::{Frame, FrameError};
pub use sender::KvSender;
pub use store::TransferStore;

use crate::KvCache;

/// How a replica takes part in prefill/decode disaggregation.
#[derive(Clone, Debug)]
pub struct KvTransferConfig {
    pub role: KvRole,
    /// `host:port` the decode role listens on for transfers.
    pub listen: String,
    /// Longest a decode request waits for its transfer, and a connection may stall.
    pub timeout: Duration,
    /// Most bytes of received blocks held before requests claim them (a transfer that does
    /// not fit is refused, and its request prefills locally).
    pub buffer_bytes: u64,
    /// Received blocks no request claimed are dropped after this long.
    pub ttl: Duration,
    /// The model file's name and size: part of the layout digest both sides must share.
    pub model_identity: String,
    /// The deployment's shared secret (`--kv-transfer-secret-file`): with it, both ends
    /// authenticate each connection and every frame; without it, frames carry a checksum
    /// only and the decode role must listen on loopback.
    pub secret: Option<KvSecret>,
    /// Shared with `/metrics`.
    pub counters: Arc<KvTransferCounters>,
}

impl PartialEq for KvTransferConfig {
    fn eq(&self, o: &Self) -> bool {
        self.role == o.role
            && self.listen == o.listen
            && self.timeout == o.timeout
            && self.buffer_bytes == o.buffer_bytes
            && self.ttl == o.ttl
            && self.model_identity == o.model_identity
            && self.secret == o.secret
            && Arc::ptr_eq(&self.counters, &o.counters)
    }
}

impl Eq for KvTransferConfig {}

/// Counters of both directions, for `/metrics` (`pagoda:kv_transfer_*`).
#[derive(Debug, Default)]
pub struct KvTransferCounters {
    pub blocks_sent: AtomicU64,
    pub bytes_sent: AtomicU64,
    pub sends_failed: AtomicU64,
    pub blocks_received: AtomicU64,
    pub bytes_received: AtomicU64,
    pub receives_failed: AtomicU64,
    /// Connections refused for authentication: no or a wrong secret, a replayed handshake,
    /// or a frame whose tag failed (tampered, replayed, reordered). Also in `receives_failed`.
    pub auth_failures: AtomicU64,
    /// Microseconds from a transfer's `Begin` to its `End` (received bytes / this = the
    /// transfer throughput).
    pub receive_micros: AtomicU64,
    /// Decode requests that prefilled locally because their transfer failed or timed out.
    pub fallbacks: AtomicU64,
    /// Transfers being sent or received now.
    pub in_flight: AtomicI64,
    /// Received blocks (and their bytes) held until a request claims them.
    pub buffered_blocks: AtomicU64,
    pub buffered_bytes: AtomicU64,
}

impl KvTransferCounters {
    fn add(a: &AtomicU64, n: u64) {
        a.fetch_add(n, Ordering::Relaxed);
    }
}

/// The layout digest both sides of a transfer must share. The model identity is the file's
/// name and size, not its path or mtime, which differ between machines.
pub fn layout_digest(model_identity: &str, kv: &KvCache, groups: &[KvGroup]) -> [u8; 32] {
    kv.layout_digest(
        "kv-transfer",
        u32::from(frame::VERSION),
        model_identity,
        groups,
    )
}

/// A model file's identity for the layout digest: its file name and size.
pub fn model_identity(path: &std::path::Path) -> String {
    let len = std::fs::metadata(path).map_or(0, |m| m.len());
    let name = path
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    format!("{name} size {len}")
}
