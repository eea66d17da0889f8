//! One replica as the router sees it: its health (from /ready and from failed requests), its
//! load (the router's own in-flight count and the replica's /metrics gauges), its prefix-cache
//! index (fed by its KV events) and the router's counters for it.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use crate::config::WorkerSpec;
use crate::index::BlockIndex;

/// Whether a replica takes requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Health {
    /// Not polled yet: tried, but after the ready ones.
    Unknown = 0,
    Ready = 1,
    /// Answers 503 (loading or draining): no new requests.
    Draining = 2,
    /// Does not answer.
    Down = 3,
}

impl Health {
    fn from_u8(v: u8) -> Self {
        match v {
            1 => Self::Ready,
            2 => Self::Draining,
            3 => Self::Down,
            _ => Self::Unknown,
        }
    }

    /// The label in metrics.
    pub fn name(self) -> &'static str {
        match self {
            Self::Unknown => "unknown",
            Self::Ready => "ready",
            Self::Draining => "draining",
            Self::Down => "down",
        }
    }
}

/// Health polls in a row that got no answer in time before a replica is taken for down. A
/// replica busy with a long prefill on a loaded machine answers late; a dead one refuses the
/// connection, which marks it down at once. Kubernetes' readiness probe waits for three too.
pub const MISSED_POLLS_DOWN: u32 = 3;

/// The router's counters for one replica.
#[derive(Debug, Default)]
pub struct WorkerCounters {
    /// Requests sent to it (every attempt).
    pub requests: AtomicU64,
    /// Attempts that failed (connection, 5xx before the first byte, a stream cut short).
    pub errors: AtomicU64,
    /// Times the policy chose it.
    pub chosen: AtomicU64,
    /// Prompt blocks the index said it held when it was chosen.
    pub prefix_hit_blocks: AtomicU64,
    /// Prompt blocks of the requests it was chosen for.
    pub prompt_blocks: AtomicU64,
}

/// A replica.
#[derive(Debug)]
pub struct Worker {
    pub spec: WorkerSpec,
    health: AtomicU8,
    /// Health polls in a row that timed out ([`MISSED_POLLS_DOWN`]).
    missed_polls: AtomicU32,
    /// Requests the router has in flight on it.
    in_flight: AtomicUsize,
    /// `num_requests_running + num_requests_waiting` at the last poll.
    polled_load: AtomicUsize,
    /// `engine_steps_total` at the last poll: a smaller value means a restart.
    engine_steps: AtomicU64,
    /// `block_size` of its `cache_config_info` (0: unknown).
    block_size: AtomicUsize,
    pub index: Mutex<BlockIndex>,
    /// Its LoRA adapters' content digests by name (`pagoda:lora_adapter_info`), which enter
    /// the block hashes of requests naming them.
    adapters: Mutex<std::collections::HashMap<String, u64>>,
    pub counters: WorkerCounters,
    /// Set when the replica leaves the pool (its event follower stops).
    retired: tokio::sync::watch::Sender<bool>,
}

impl Worker {
    /// A replica not polled yet.
    pub fn new(spec: WorkerSpec) -> Self {
        Self {
            spec,
            health: AtomicU8::new(Health::Unknown as u8),
            missed_polls: AtomicU32::new(0),
            in_flight: AtomicUsize::new(0),
            polled_load: AtomicUsize::new(0),
            engine_steps: AtomicU64::new(0),
            block_size: AtomicUsize::new(0),
            index: Mutex::new(BlockIndex::default()),
            adapters: Mutex::default(),
            counters: WorkerCounters::default(),
            retired: tokio::sync::watch::channel(false).0,
        }
    }

    /// Marks it gone from the pool.
    pub fn retire(&self) {
        self.retired.send_replace(true);
    }

    /// Changes when it is retired (or dropped).
    pub fn retired(&self) -> tokio::sync::watch::Receiver<bool> {
        self.retired.subscribe()
    }

    pub fn url(&self) -> &str {
        &self.spec.url
    }

    pub fn health(&self) -> Health {
        Health::from_u8(self.health.load(Ordering::Acquire))
    }

    /// Records a new health; a replica that comes back from down may be a new process, so
    /// what its index says is forgotten (its events rebuild it).
    pub fn set_health(&self, h: Health) {
        let old = Health::from_u8(self.health.swap(h as u8, Ordering::AcqRel));
        if old == Health::Down && h != Health::Down {
            self.clear_index();
        }
        if old != h {
            tracing::info!(
                worker = self.url(),
                from = old.name(),
                to = h.name(),
                "replica"
            );
        }
    }

    /// A health poll got an answer: `h`, and the run of missed polls ends.
    pub fn answered_poll(&self, h: Health) {
        self.missed_polls.store(0, Ordering::Relaxed);
        self.set_health(h);
    }

    /// A health poll timed out: down once [`MISSED_POLLS_DOWN`] have in a row, otherwise its
    /// health stands. Returns whether it is now down.
    pub fn missed_poll(&self) -> bool {
        let missed = self.missed_polls.fetch_add(1, Ordering::Relaxed) + 1;
        if missed >= MISSED_POLLS_DOWN {
            self.set_health(Health::Down);
        }
        self.health() == Health::Down
    }

    /// Whether new requests may go to it.
    pub fn accepts(&self) -> bool {
        matches!(self.health(), Health::Ready | Health::Unknown)
    }

    /// The load the policies compare: the router's own in-flight count (fresh) or the
    /// replica's gauges (which also count other clients), whichever is larger.
    pub fn load(&self) -> usize {
        self.in_flight
            .load(Ordering::Acquire)
            .max(self.polled_load.load(Ordering::Acquire))
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    /// Counts a request in flight until the guard drops.
    pub fn start(self: &std::sync::Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.counters.requests.fetch_add(1, Ordering::Relaxed);
        InFlight(std::sync::Arc::clone(self))
    }

    /// Takes a /metrics poll's numbers.
    pub fn observe(&self, load: usize, engine_steps: Option<u64>, block_size: Option<usize>) {
        self.polled_load.store(load, Ordering::Release);
        if let Some(bs) = block_size {
            self.block_size.store(bs, Ordering::Release);
        }
        if let Some(steps) = engine_steps {
            let before = self.engine_steps.swap(steps, Ordering::AcqRel);
            if steps < before {
                tracing::info!(
                    worker = self.url(),
                    "replica restarted: its index is cleared"
                );
                self.clear_index();
            }
        }
    }

    /// Takes a /metrics poll's adapters (name, digest).
    pub fn observe_adapters(&self, adapters: std::collections::HashMap<String, u64>) {
        if let Ok(mut a) = self.adapters.lock() {
            *a = adapters;
        }
    }

    /// The content digest of its adapter `name`, if it serves one.
    pub fn adapter_digest(&self, name: &str) -> Option<u64> {
        self.adapters.lock().ok()?.get(name).copied()
    }

    /// Its block size: from its metrics, else from its events, else 16 (pagoda's default).
    pub fn block_size(&self) -> usize {
        match self.block_size.load(Ordering::Acquire) {
            0 => match self.index.lock().map(|ix| ix.block_size) {
                Ok(bs) if bs > 0 => bs,
                _ => 16,
            },
            bs => bs,
        }
    }

    pub fn clear_index(&self) {
        if let Ok(mut ix) = self.index.lock() {
            ix.clear();
        }
    }

    /// Blocks its index holds.
    pub fn indexed_blocks(&self) -> usize {
        self.index.lock().map(|ix| ix.len()).unwrap_or(0)
    }

    /// How many of `hashes` it holds (or was just sent), from the first.
    pub fn matched(&self, hashes: &[u64]) -> usize {
        let now = std::time::Instant::now();
        self.index
            .lock()
            .map(|ix| ix.matched(hashes, now))
            .unwrap_or(0)
    }

    /// Counts `hashes` as held for a while: a prompt routed here will be cached here.
    pub fn predict(&self, hashes: &[u64]) {
        if let Ok(mut ix) = self.index.lock() {
            ix.predict(hashes, std::time::Instant::now());
        }
    }
}

/// A request in flight on a replica (counted in its load until dropped).
#[derive(Debug)]
pub struct InFlight(std::sync::Arc<Worker>);

impl InFlight {
    pub fn worker(&self) -> &Worker {
        &self.0
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}
