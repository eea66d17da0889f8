//! One served model, loaded or not (`Slot`): its spec, where it stands, its requests in flight
//! and idle clock, its metrics; and the `Signals` a request's end sends (a load waiting for
//! room looks again, the keep-alive thread checks expiries).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use pagoda_model::EngineSetup;

use crate::model::keep_alive::KeepAlive;
use crate::model::memory;
use crate::model::model_error::ModelError;
use crate::model::served::Served;
use crate::observe::metrics::engine::Metrics;

/// A model the server can serve, loaded or not.
#[derive(Clone, Debug)]
pub struct ModelSpec {
    /// The name clients send in `model` and `/v1/models` lists.
    pub id: String,
    /// Other names it answers to (a catalog name, the file's stem).
    pub aliases: Vec<String>,
    pub path: PathBuf,
    pub setup: EngineSetup,
    /// Loaded at start-up (`--preload`, and the default model).
    pub preload: bool,
}

/// Where a model stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Presence {
    Unloaded,
    Loading,
    Loaded,
}

impl Presence {
    pub fn name(self) -> &'static str {
        match self {
            Self::Unloaded => "unloaded",
            Self::Loading => "loading",
            Self::Loaded => "loaded",
        }
    }
}

pub(super) enum SlotState {
    Unloaded,
    Loading,
    Loaded {
        served: Arc<Served>,
        bytes: u64,
    },
    /// The last attempt failed so (the next request tries again).
    Failed(ModelError),
}

/// When the model was last used and when it may be unloaded.
pub(super) struct Usage {
    pub(super) last_used: Instant,
    pub(super) keep_alive: KeepAlive,
    /// Set when the last request ended; `None` while busy or kept forever.
    pub(super) expires: Option<Instant>,
}

/// Loads, failures and unloads of one model, for `/metrics`.
#[derive(Default)]
pub struct Lifecycle {
    pub loads: AtomicU64,
    pub failures: AtomicU64,
    pub unloads: AtomicU64,
    /// Seconds spent loading, over all loads (`_sum` of the load time).
    pub load_seconds: Mutex<f64>,
}

/// One served model.
pub struct Slot {
    pub spec: ModelSpec,
    /// Its index in the server's list; the first (index 0) is the default model.
    pub index: usize,
    pub(super) state: Mutex<SlotState>,
    /// Held while loading: requests arriving meanwhile wait for that load.
    pub(super) loading: Mutex<()>,
    /// Loads attempted, to tell a waiter whether the load it waited for failed.
    pub(super) attempts: AtomicU64,
    pub(super) in_flight: AtomicUsize,
    pub(super) usage: Mutex<Usage>,
    /// Its requests' latencies and counts (`model_name` label).
    pub metrics: Arc<Metrics>,
    pub lifecycle: Lifecycle,
    /// The context length its file declares, read once (for `/v1/models` while unloaded).
    pub(super) declared_context: std::sync::OnceLock<Option<usize>>,
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The state under these locks stays consistent across a panic elsewhere.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Slot {
    pub fn presence(&self) -> Presence {
        match &*lock(&self.state) {
            SlotState::Loaded { .. } => Presence::Loaded,
            SlotState::Loading => Presence::Loading,
            SlotState::Unloaded | SlotState::Failed(_) => Presence::Unloaded,
        }
    }

    /// The model, when loaded (for listing and metrics; requests take a lease instead).
    pub fn served(&self) -> Option<Arc<Served>> {
        match &*lock(&self.state) {
            SlotState::Loaded { served, .. } => Some(Arc::clone(served)),
            _ => None,
        }
    }

    /// Bytes counted against the budget: measured when loaded, estimated otherwise.
    pub fn bytes(&self, quantization: pagoda_hf::Quantization) -> u64 {
        match &*lock(&self.state) {
            SlotState::Loaded { bytes, .. } => *bytes,
            _ => memory::estimate(&self.spec.path, quantization, &self.spec.setup),
        }
    }

    /// The context length the model's file declares (a GGUF's `context_length`), without
    /// loading it; the engine may cap it to its KV pool once loaded.
    pub fn declared_context(&self) -> Option<usize> {
        *self.declared_context.get_or_init(|| {
            let file = pagoda_gguf::GgufFile::open(&self.spec.path).ok()?;
            pagoda_model::ModelConfig::from_gguf(&file)
                .ok()
                .map(|c| c.context_length)
        })
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    pub fn keep_alive(&self) -> KeepAlive {
        lock(&self.usage).keep_alive
    }

    /// A lease when loaded. Counted in flight under the state lock, so an eviction (which
    /// checks the count under the same lock) never takes a model a request just got.
    pub(super) fn try_lease(&self) -> Option<Arc<Served>> {
        let st = lock(&self.state);
        match &*st {
            SlotState::Loaded { served, .. } => {
                self.in_flight.fetch_add(1, Ordering::AcqRel);
                lock(&self.usage).expires = None;
                Some(Arc::clone(served))
            }
            _ => None,
        }
    }

    /// Ends a request: the model's idle clock starts when the last one ends.
    pub(super) fn release(&self, keep_alive: Option<KeepAlive>) -> bool {
        let now = Instant::now();
        let mut u = lock(&self.usage);
        if let Some(k) = keep_alive {
            u.keep_alive = k;
        }
        u.last_used = now;
        let idle = self.in_flight.fetch_sub(1, Ordering::AcqRel) == 1;
        if idle {
            u.expires = match u.keep_alive {
                KeepAlive::Forever => None,
                KeepAlive::For(d) => Some(now + d),
            };
        }
        idle
    }

    /// Takes the model out if no request holds it: the caller shuts it down.
    pub(super) fn take_if_idle(&self) -> Option<Arc<Served>> {
        let mut st = lock(&self.state);
        if self.in_flight() != 0 || !matches!(*st, SlotState::Loaded { .. }) {
            return None;
        }
        match std::mem::replace(&mut *st, SlotState::Unloaded) {
            SlotState::Loaded { served, .. } => {
                self.lifecycle.unloads.fetch_add(1, Ordering::Relaxed);
                lock(&self.usage).expires = None;
                Some(served)
            }
            _ => None,
        }
    }
}

impl Slot {
    /// Whether `name` is this model's id or one of its aliases.
    pub fn answers_to(&self, name: &str) -> bool {
        self.spec.id == name || self.spec.aliases.iter().any(|a| a == name)
    }
}

/// What the end of a request wakes.
#[derive(Default)]
pub struct Signals {
    /// Bumped and signalled when a model goes idle: a load waiting for room looks again.
    pub(super) idle: (Mutex<u64>, Condvar),
    /// Wakes the keep-alive thread.
    pub(super) expiry: (Mutex<bool>, Condvar),
}

impl Signals {
    /// A request ended (its lease dropped).
    pub(crate) fn released(&self, slot: &Slot, keep_alive: Option<KeepAlive>) {
        if !slot.release(keep_alive) {
            return;
        }
        *lock(&self.idle.0) += 1;
        self.idle.1.notify_all();
        *lock(&self.expiry.0) = true;
        self.expiry.1.notify_all();
    }

    /// Wakes the keep-alive thread to look at the expiries now.
    pub(super) fn expiry_changed(&self) {
        *lock(&self.expiry.0) = true;
        self.expiry.1.notify_all();
    }
}
