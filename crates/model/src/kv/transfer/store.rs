//! The decode side of a KV transfer: a listener on `--kv-transfer-port` receives transfers
//! (one thread per connection; a transfer becomes visible only once it arrived whole and
//! checked), holds their blocks in a bounded buffer with a TTL, and is the engine's lower KV
//! tier (`pagoda_core::KvTier`): a waiting decode request asks `awaiting` until its transfer
//! arrived, failed or timed out, then its blocks are claimed like a disk read that is done.
//! With a secret, a connection is read past its handshake only once the peer proved it.

use std::collections::HashMap;
use std::io::BufReader;
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use pagoda_core::kv::{BlockHash, KvTier, KvTierStats, LoadTicket};

use super::auth::{AuthError, KvSecret, Seal, receiver_handshake};
use super::frame::{Frame, FrameError, MAX_PAYLOAD, VERSION};
use super::{KvTransferConfig, KvTransferCounters, KvTransferCounters as C};

/// Connections received at once at most: more are closed unread, so peers that connect and
/// stall cannot tie up a thread each without bound.
const MAX_CONNECTIONS: i64 = 64;

/// Where a transfer is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// A request asked for it before any byte arrived (since then).
    Asked(Instant),
    Receiving,
    Done,
    Failed,
    /// Failed or timed out, and a request was told to prefill itself.
    FellBack,
}

#[derive(Default)]
struct Inner {
    /// Received blocks by group key: payload and arrival.
    blocks: HashMap<BlockHash, (Vec<u8>, Instant)>,
    bytes: u64,
    /// Transfers by id, with when they last changed.
    transfers: HashMap<String, (State, Instant)>,
    /// Blocks claimed by a tier read, until the runner writes them in.
    reads: HashMap<LoadTicket, Vec<(BlockHash, Vec<u8>)>>,
    /// The last TTL sweep (sweeps are throttled: `contains` runs per block of a lookup).
    swept: Option<Instant>,
}

struct Shared {
    layout: [u8; 32],
    payload_len: usize,
    timeout: Duration,
    ttl: Duration,
    max_bytes: u64,
    secret: Option<KvSecret>,
    inner: Mutex<Inner>,
    counters: Arc<KvTransferCounters>,
    stop: AtomicBool,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl Shared {
    fn lock(&self) -> Option<MutexGuard<'_, Inner>> {
        let mut g = self.inner.lock().ok()?;
        self.expire(&mut g);
        Some(g)
    }

    /// Drops blocks and transfer records older than the TTL (at most a few times a second).
    fn expire(&self, g: &mut Inner) {
        if g.swept
            .is_some_and(|t| t.elapsed() < Duration::from_millis(250))
        {
            return;
        }
        g.swept = Some(Instant::now());
        let ttl = self.ttl;
        let mut freed = 0u64;
        g.blocks.retain(|_, (p, at)| {
            let keep = at.elapsed() < ttl;
            if !keep {
                freed += p.len() as u64;
            }
            keep
        });
        g.bytes -= freed;
        g.transfers.retain(|_, (_, at)| at.elapsed() < ttl);
        self.publish(g);
    }

    fn publish(&self, g: &Inner) {
        let c = &self.counters;
        c.buffered_blocks
            .store(g.blocks.len() as u64, Ordering::Relaxed);
        c.buffered_bytes.store(g.bytes, Ordering::Relaxed);
    }

    fn set(&self, id: &str, state: State) {
        if let Some(mut g) = self.lock() {
            g.transfers.insert(id.to_owned(), (state, Instant::now()));
        }
    }
}

/// The transfer listener and the received blocks.
pub struct TransferStore {
    shared: Arc<Shared>,
    next_ticket: AtomicU64,
    addr: std::net::SocketAddr,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for TransferStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransferStore")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl TransferStore {
    /// Binds `config.listen` and starts accepting transfers of blocks with this layout.
    pub fn open(
        config: &KvTransferConfig,
        layout: [u8; 32],
        payload_len: usize,
    ) -> std::io::Result<Self> {
        let listener = TcpListener::bind(&config.listen)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            layout,
            payload_len,
            timeout: config.timeout,
            ttl: config.ttl,
            max_bytes: config.buffer_bytes,
            secret: config.secret.clone(),
            inner: Mutex::new(Inner::default()),
            counters: Arc::clone(&config.counters),
            stop: AtomicBool::new(false),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        });
        let s = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("pagoda-kv-transfer".into())
            .spawn(move || accept_loop(&s, &listener))?;
        tracing::info!(%addr, "KV transfer listener on");
        Ok(Self {
            shared,
            next_ticket: AtomicU64::new(1),
            addr,
            thread: Some(thread),
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> std::net::SocketAddr {
        self.addr
    }

    /// The blocks claimed by `ticket`, forgetting it.
    pub fn take_read(&self, ticket: LoadTicket) -> Vec<(BlockHash, Vec<u8>)> {
        self.shared
            .lock()
            .and_then(|mut g| g.reads.remove(&ticket))
            .unwrap_or_default()
    }
}

impl Drop for TransferStore {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        // Wakes the blocking accept so the thread sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn accept_loop(shared: &Arc<Shared>, listener: &TcpListener) {
    for conn in listener.incoming() {
        if shared.stop.load(Ordering::Relaxed) {
            return;
        }
        let Ok(stream) = conn else { continue };
        if shared.counters.in_flight.load(Ordering::Relaxed) >= MAX_CONNECTIONS {
            C::add(&shared.counters.receives_failed, 1);
            tracing::warn!("KV transfer refused: {MAX_CONNECTIONS} connections already open");
            continue;
        }
        let s = Arc::clone(shared);
        let spawned = std::thread::Builder::new()
            .name("pagoda-kv-recv".into())
            .spawn(move || receive(&s, stream));
        if let Err(e) = spawned {
            tracing::warn!("KV transfer: cannot start a receiver thread: {e}");
        }
    }
}

/// Why a transfer was refused.
#[derive(Debug, thiserror::Error)]
enum ReceiveError {
    #[error(transparent)]
    Frame(#[from] FrameError),
    #[error(transparent)]
    Auth(#[from] AuthError),
    #[error("transfer {0} was received already (a replay)")]
    Duplicate(String),
    #[error("the connection closed before the transfer's end")]
    Closed,
    #[error("expected a {0} frame")]
    Unexpected(&'static str),
    #[error("protocol version {0}, this replica speaks {VERSION}")]
    Version(u16),
    #[error("the sender's KV layout (model, dtype, block size, heads) differs from this replica's")]
    Layout,
    #[error("block payloads of {got} bytes, this replica's are {want}")]
    PayloadLen { got: usize, want: usize },
    #[error("{blocks} blocks ({bytes} bytes) do not fit the receive buffer (--kv-transfer-buffer)")]
    Full { blocks: usize, bytes: u64 },
}

fn receive(shared: &Shared, stream: TcpStream) {
    let c = &shared.counters;
    c.in_flight.fetch_add(1, Ordering::Relaxed);
    let mut id = None;
    if let Err(e) = receive_into(shared, stream, &mut id) {
        C::add(&c.receives_failed, 1);
        if matches!(
            e,
            ReceiveError::Auth(_)
                | ReceiveError::Frame(FrameError::BadTag | FrameError::PeerAuthenticates)
        ) {
            C::add(&c.auth_failures, 1);
        }
        tracing::warn!(
            id = id.as_deref().unwrap_or("?"),
            "KV transfer refused: {e}"
        );
        if let Some(id) = &id {
            shared.set(id, State::Failed);
        }
    }
    c.in_flight.fetch_sub(1, Ordering::Relaxed);
}

fn receive_into(
    shared: &Shared,
    stream: TcpStream,
    id_out: &mut Option<String>,
) -> Result<(), ReceiveError> {
    stream
        .set_read_timeout(Some(shared.timeout))
        .map_err(FrameError::Io)?;
    stream
        .set_write_timeout(Some(shared.timeout))
        .map_err(FrameError::Io)?;
    let mut seal = match &shared.secret {
        None => Seal::Checksum,
        Some(secret) => receiver_handshake(&mut &stream, secret)?,
    };
    let mut r = BufReader::with_capacity(1 << 20, stream);
    let begin = Frame::read_from(&mut r, 64 + super::frame::MAX_ID_LEN, &mut seal)?;
    let Some(Frame::Begin {
        version,
        layout,
        id,
        num_blocks,
        payload_len,
    }) = begin
    else {
        return Err(ReceiveError::Unexpected("Begin"));
    };
    // Checked before `id_out` is set: a replay must not fail the genuine transfer it copies.
    let known = shared
        .lock()
        .and_then(|g| g.transfers.get(&id).map(|&(s, _)| s));
    if matches!(known, Some(State::Receiving | State::Done)) {
        return Err(ReceiveError::Duplicate(id));
    }
    *id_out = Some(id.clone());
    if version != VERSION {
        return Err(ReceiveError::Version(version));
    }
    if layout != shared.layout {
        return Err(ReceiveError::Layout);
    }
    let want = shared.payload_len;
    if payload_len as usize != want || want > MAX_PAYLOAD {
        return Err(ReceiveError::PayloadLen {
            got: payload_len as usize,
            want,
        });
    }
    let total = u64::from(num_blocks) * want as u64;
    if total > shared.max_bytes {
        return Err(ReceiveError::Full {
            blocks: num_blocks as usize,
            bytes: total,
        });
    }
    shared.set(&id, State::Receiving);
    let started = Instant::now();
    // Bounded by the buffer check above: at most `max_bytes` held for this transfer.
    let mut blocks = Vec::with_capacity(num_blocks as usize);
    for _ in 0..num_blocks {
        match Frame::read_from(&mut r, 32 + want, &mut seal)? {
            Some(Frame::Block { key, payload }) if payload.len() == want => {
                blocks.push((key, payload));
            }
            Some(Frame::Block { payload, .. }) => {
                return Err(ReceiveError::PayloadLen {
                    got: payload.len(),
                    want,
                });
            }
            Some(_) => return Err(ReceiveError::Unexpected("Block")),
            None => return Err(ReceiveError::Closed),
        }
    }
    match Frame::read_from(&mut r, 0, &mut seal)? {
        Some(Frame::End) => {}
        Some(_) => return Err(ReceiveError::Unexpected("End")),
        None => return Err(ReceiveError::Closed),
    }
    let Some(mut g) = shared.lock() else {
        return Err(ReceiveError::Closed);
    };
    if g.bytes + total > shared.max_bytes {
        return Err(ReceiveError::Full {
            blocks: num_blocks as usize,
            bytes: total,
        });
    }
    let now = Instant::now();
    for (key, payload) in blocks {
        let len = payload.len() as u64;
        if let Some((old, _)) = g.blocks.insert(key, (payload, now)) {
            g.bytes -= old.len() as u64;
        }
        g.bytes += len;
    }
    C::add(&shared.counters.blocks_received, u64::from(num_blocks));
    C::add(&shared.counters.bytes_received, total);
    C::add(
        &shared.counters.receive_micros,
        started.elapsed().as_micros() as u64,
    );
    g.transfers.insert(id, (State::Done, now));
    shared.publish(&g);
    Ok(())
}

impl KvTier for TransferStore {
    fn enabled(&self) -> bool {
        true
    }

    fn contains(&self, key: &BlockHash) -> bool {
        self.shared
            .lock()
            .is_some_and(|g| g.blocks.contains_key(key))
    }

    fn worth_reading(&self, blocks: usize, _tokens: usize) -> bool {
        // The bytes are in memory already: a copy always beats recomputing.
        blocks > 0
    }

    fn prefetch(&self, keys: Vec<BlockHash>) -> LoadTicket {
        let ticket = self.next_ticket.fetch_add(1, Ordering::Relaxed);
        if let Some(mut g) = self.shared.lock() {
            let mut claimed = Vec::with_capacity(keys.len());
            for k in keys {
                let Some((payload, _)) = g.blocks.remove(&k) else {
                    break;
                };
                g.bytes -= payload.len() as u64;
                claimed.push((k, payload));
            }
            g.reads.insert(ticket, claimed);
            self.shared.publish(&g);
        }
        ticket
    }

    fn poll(&self, ticket: LoadTicket) -> Option<usize> {
        Some(
            self.shared
                .lock()
                .and_then(|g| g.reads.get(&ticket).map(Vec::len))
                .unwrap_or(0),
        )
    }

    fn cancel(&self, ticket: LoadTicket) {
        if let Some(mut g) = self.shared.lock() {
            g.reads.remove(&ticket);
        }
    }

    fn stats(&self) -> KvTierStats {
        KvTierStats {
            enabled: true,
            hits: self.shared.hits.load(Ordering::Relaxed),
            misses: self.shared.misses.load(Ordering::Relaxed),
            ..KvTierStats::default()
        }
    }

    fn record_lookup(&self, hit: usize, miss: usize) {
        self.shared.hits.fetch_add(hit as u64, Ordering::Relaxed);
        self.shared.misses.fetch_add(miss as u64, Ordering::Relaxed);
    }

    fn awaiting(&self, id: &str) -> bool {
        let Some(mut g) = self.shared.lock() else {
            return false;
        };
        let now = Instant::now();
        let (waiting, next) = match g.transfers.get(id).map(|&(s, _)| s) {
            None => (true, Some(State::Asked(now))),
            Some(State::Asked(t)) if t.elapsed() < self.shared.timeout => (true, None),
            Some(State::Receiving) => (true, None),
            Some(State::Done | State::FellBack) => (false, None),
            Some(State::Asked(_) | State::Failed) => (false, Some(State::FellBack)),
        };
        if next == Some(State::FellBack) {
            C::add(&self.shared.counters.fallbacks, 1);
            tracing::warn!(id, "KV transfer failed or timed out: prefilling locally");
        }
        if let Some(s) = next {
            g.transfers.insert(id.to_owned(), (s, now));
        }
        waiting
    }

    fn takes_saves(&self) -> bool {
        false
    }
}
