//! The prefill side of a KV transfer: the runner hands over a finished request's block bytes
//! (already copied out of the arena, so the engine never waits on the network) and the
//! `pagoda-kv-sender` thread writes them, one connection per transfer, to the decode replica.
//! A full queue or a failed connection is counted; the decode side then prefills itself. With
//! a secret, no KV byte leaves before the receiver proved it knows the secret too.

use std::io::{BufWriter, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::thread::JoinHandle;
use std::time::Duration;

use pagoda_core::kv::BlockHash;

use super::auth::{KvSecret, Seal, sender_handshake};
use super::frame::{Frame, VERSION};
use super::{KvTransferCounters, KvTransferCounters as C};

/// Transfers queued for the sender thread at most (each a request's prompt).
const QUEUE: usize = 64;

/// One request's blocks on their way.
struct Job {
    id: String,
    addr: String,
    blocks: Vec<(BlockHash, Vec<u8>)>,
}

/// The sender thread and its queue.
pub struct KvSender {
    tx: Option<SyncSender<Job>>,
    counters: Arc<KvTransferCounters>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for KvSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KvSender").finish_non_exhaustive()
    }
}

impl KvSender {
    /// Starts the thread; `layout` is this replica's layout digest, `timeout` bounds the
    /// connect, the handshake and each write; `secret` authenticates every connection.
    pub fn start(
        layout: [u8; 32],
        payload_len: usize,
        timeout: Duration,
        secret: Option<KvSecret>,
        counters: Arc<KvTransferCounters>,
    ) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::sync_channel::<Job>(QUEUE);
        let c = Arc::clone(&counters);
        let thread = std::thread::Builder::new()
            .name("pagoda-kv-sender".into())
            .spawn(move || {
                for job in rx {
                    let blocks = job.blocks.len() as u64;
                    let (id, addr) = (job.id.clone(), job.addr.clone());
                    let sent = send(job, layout, payload_len, timeout, secret.as_ref(), &c);
                    match sent {
                        Ok(bytes) => {
                            C::add(&c.blocks_sent, blocks);
                            C::add(&c.bytes_sent, bytes);
                        }
                        Err(e) => {
                            C::add(&c.sends_failed, 1);
                            tracing::warn!(%id, %addr, "KV transfer failed: {e}");
                        }
                    }
                    c.in_flight.fetch_sub(1, Ordering::Relaxed);
                }
            })?;
        Ok(Self {
            tx: Some(tx),
            counters,
            thread: Some(thread),
        })
    }

    /// Queues a transfer; never waits (a full queue fails it, counted).
    pub fn send(&self, id: String, addr: String, blocks: Vec<(BlockHash, Vec<u8>)>) {
        let c = &self.counters;
        c.in_flight.fetch_add(1, Ordering::Relaxed);
        let sent = self.tx.as_ref().is_some_and(|tx| {
            !matches!(
                tx.try_send(Job { id, addr, blocks }),
                Err(TrySendError::Full(_) | TrySendError::Disconnected(_))
            )
        });
        if !sent {
            c.in_flight.fetch_sub(1, Ordering::Relaxed);
            C::add(&c.sends_failed, 1);
            tracing::warn!("KV transfer dropped: the sender's queue is full");
        }
    }
}

impl Drop for KvSender {
    fn drop(&mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Writes one transfer; the payload bytes sent.
fn send(
    job: Job,
    layout: [u8; 32],
    payload_len: usize,
    timeout: Duration,
    secret: Option<&KvSecret>,
    counters: &KvTransferCounters,
) -> std::io::Result<u64> {
    let addr = job
        .addr
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| std::io::Error::other(format!("{} resolves to nothing", job.addr)))?;
    let stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_write_timeout(Some(timeout))?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_nodelay(true)?;
    let mut seal = match secret {
        None => Seal::Checksum,
        Some(secret) => sender_handshake(&mut &stream, secret).map_err(|e| {
            C::add(&counters.auth_failures, 1);
            std::io::Error::other(e)
        })?,
    };
    let mut w = BufWriter::with_capacity(1 << 20, &stream);
    Frame::Begin {
        version: VERSION,
        layout,
        id: job.id.clone(),
        num_blocks: job.blocks.len() as u32,
        payload_len: payload_len as u32,
    }
    .write_to(&mut w, &mut seal)?;
    let mut bytes = 0u64;
    for (key, payload) in job.blocks {
        bytes += payload.len() as u64;
        Frame::Block { key, payload }.write_to(&mut w, &mut seal)?;
    }
    Frame::End.write_to(&mut w, &mut seal)?;
    w.flush()?;
    drop(w);
    let _ = stream.shutdown(Shutdown::Write);
    Ok(bytes)
}
