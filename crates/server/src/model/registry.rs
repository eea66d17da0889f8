//! The models one server serves, by id and alias: each a [`Slot`] that is loaded by the first
//! request naming it (concurrent requests share the load), and unloaded when its keep-alive
//! runs out, when `/models/unload` asks, or when another model needs its memory (`eviction`).
//! A request holds a [`ModelLease`] while it runs, so a model in use is never unloaded.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock, Weak};
use std::time::{Duration, Instant};

use pagoda_core::engine::StepTurns;

use crate::config::ServerConfig;
use crate::model::eviction::{NoRoom, Resident, victims};
use crate::model::keep_alive::KeepAlive;
use crate::model::lease::ModelLease;
use crate::model::memory;
pub use crate::model::model_error::ModelError;
pub use crate::model::models_config::ModelsConfig;
use crate::model::served::{LoadSettings, Served};
use crate::model::slot::{Lifecycle, Signals, SlotState, Usage, lock};
pub use crate::model::slot::{ModelSpec, Presence, Slot};
use crate::observe::metrics::engine::Metrics;

/// Every model of the server.
pub struct ModelRegistry {
    slots: RwLock<Vec<Arc<Slot>>>,
    config: ServerConfig,
    budget: u64,
    /// One load (with the evictions that make its room) at a time.
    load_order: Mutex<()>,
    /// What a request's end wakes (shared with the leases and the keep-alive thread, which
    /// holds the registry only while it looks: the registry, and the engines in it, go when
    /// the server does).
    signals: Arc<Signals>,
    pub turns: Arc<StepTurns>,
}

impl ModelRegistry {
    pub fn new(config: ServerConfig) -> Arc<Self> {
        let budget = config
            .models
            .memory_budget
            .unwrap_or_else(memory::default_budget);
        let registry = Arc::new(Self {
            slots: RwLock::new(Vec::new()),
            config,
            budget,
            load_order: Mutex::new(()),
            signals: Arc::new(Signals::default()),
            turns: Arc::new(StepTurns::new()),
        });
        let (weak, signals) = (Arc::downgrade(&registry), Arc::clone(&registry.signals));
        let spawned = std::thread::Builder::new()
            .name("pagoda-keep-alive".into())
            .spawn(move || reap(&weak, &signals));
        if let Err(e) = spawned {
            tracing::error!("cannot start the keep-alive thread, idle models stay loaded: {e}");
        }
        registry
    }

    pub fn budget(&self) -> u64 {
        self.budget
    }

    /// Adds a model; false when its id or an alias is taken (the first keeps it).
    pub fn add(&self, spec: ModelSpec) -> bool {
        let mut slots = self.slots.write().unwrap_or_else(PoisonError::into_inner);
        let names = || std::iter::once(&spec.id).chain(&spec.aliases);
        if slots.iter().any(|s| names().any(|n| s.answers_to(n))) {
            return false;
        }
        let keep_alive = self.config.models.keep_alive;
        let index = slots.len();
        slots.push(Arc::new(Slot {
            index,
            spec,
            state: Mutex::new(SlotState::Unloaded),
            loading: Mutex::new(()),
            attempts: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            usage: Mutex::new(Usage {
                last_used: Instant::now(),
                keep_alive,
                expires: None,
            }),
            metrics: Arc::new(Metrics::new()),
            lifecycle: Lifecycle::default(),
            declared_context: std::sync::OnceLock::new(),
        }));
        true
    }

    /// Serves the models of `--models-dir` not served yet; how many were added.
    pub fn rescan_dir(&self) -> std::io::Result<usize> {
        let Some(dir) = &self.config.models.dir else {
            return Ok(0);
        };
        let mut added = 0;
        for (id, path) in crate::model::models_dir::scan(dir)? {
            let known = self.slots().iter().any(|s| s.spec.path == path);
            if !known
                && self.add(ModelSpec {
                    id,
                    aliases: Vec::new(),
                    path,
                    setup: self.config.models.dir_setup.clone(),
                    preload: false,
                })
            {
                added += 1;
            }
        }
        Ok(added)
    }

    /// Every model, the default first.
    pub fn slots(&self) -> Vec<Arc<Slot>> {
        self.slots
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The default model (the first added).
    pub fn default_slot(&self) -> Option<Arc<Slot>> {
        self.slots().into_iter().next()
    }

    /// The model `name` selects, and the adapter when it names one of the default model's
    /// LoRA adapters; `None` or an empty name: the default model.
    pub fn find(&self, name: Option<&str>) -> Result<(Arc<Slot>, Option<String>), ModelError> {
        let slots = self.slots();
        let Some(first) = slots.first() else {
            return Err(ModelError::NoModels);
        };
        let Some(name) = name.filter(|n| !n.is_empty()) else {
            return Ok((Arc::clone(first), None));
        };
        if let Some(s) = slots.iter().find(|s| s.answers_to(name)) {
            return Ok((Arc::clone(s), None));
        }
        // Adapters are served over the default model, and known only once it is loaded.
        if let Some(Served::Generate(l)) = first.served().as_deref()
            && l.loras.contains(name)
        {
            return Ok((Arc::clone(first), Some(name.to_owned())));
        }
        Err(ModelError::NotFound {
            model: name.to_owned(),
            available: slots
                .iter()
                .map(|s| format!("`{}`", s.spec.id))
                .collect::<Vec<_>>()
                .join(", "),
        })
    }

    /// The model `name` selects, loaded (waiting for its load, or loading it), held for one
    /// request. Blocking: call it off the async runtime.
    pub fn acquire_blocking(
        self: &Arc<Self>,
        name: Option<&str>,
        keep_alive: Option<KeepAlive>,
    ) -> Result<ModelLease, ModelError> {
        let (slot, adapter) = self.find(name)?;
        let served = self.load_blocking(&slot)?;
        Ok(ModelLease::new(
            Arc::clone(&self.signals),
            slot,
            served,
            adapter,
            keep_alive,
        ))
    }

    /// The same from async code: the fast path (loaded) without leaving the runtime.
    pub async fn acquire(
        self: &Arc<Self>,
        name: Option<&str>,
        keep_alive: Option<KeepAlive>,
    ) -> Result<ModelLease, ModelError> {
        let (slot, adapter) = self.find(name)?;
        if let Some(served) = slot.try_lease() {
            return Ok(ModelLease::new(
                Arc::clone(&self.signals),
                slot,
                served,
                adapter,
                keep_alive,
            ));
        }
        let this = Arc::clone(self);
        let name = name.map(str::to_owned);
        tokio::task::spawn_blocking(move || this.acquire_blocking(name.as_deref(), keep_alive))
            .await
            .map_err(|e| ModelError::LoadFailed {
                model: slot.spec.id.clone(),
                message: format!("the load panicked: {e}"),
            })?
    }

    /// Loads `slot` unless loaded, and counts one request in flight on it.
    fn load_blocking(&self, slot: &Arc<Slot>) -> Result<Arc<Served>, ModelError> {
        if let Some(s) = slot.try_lease() {
            return Ok(s);
        }
        let seen = slot.attempts.load(Ordering::Acquire);
        let _loading = lock(&slot.loading);
        if let Some(s) = slot.try_lease() {
            return Ok(s);
        }
        // The attempt this request waited for failed (the load, or making room for it): it
        // gets that error, not a second try (and not a second wait for room).
        if slot.attempts.load(Ordering::Acquire) != seen
            && let SlotState::Failed(e) = &*lock(&slot.state)
        {
            return Err(e.clone());
        }
        let _order = lock(&self.load_order);
        slot.attempts.fetch_add(1, Ordering::AcqRel);
        if let Err(e) = self.make_room(slot) {
            *lock(&slot.state) = SlotState::Failed(e.clone());
            return Err(e);
        }
        *lock(&slot.state) = SlotState::Loading;
        let started = Instant::now();
        tracing::info!(model = slot.spec.id, path = %slot.spec.path.display(), "loading model");
        let settings = LoadSettings {
            config: &self.config,
            setup: &slot.spec.setup,
            served_name: &slot.spec.id,
            primary: slot.index == 0,
            turns: Arc::clone(&self.turns),
        };
        let loaded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            crate::model::served::load(&slot.spec.path, &settings)
        }));
        let seconds = started.elapsed().as_secs_f64();
        let served = match loaded {
            Ok(Ok(s)) => Arc::new(s),
            Ok(Err(e)) => return Err(self.failed(slot, e.to_string())),
            Err(_) => return Err(self.failed(slot, "the load panicked".to_owned())),
        };
        let bytes = match &*served {
            Served::Generate(l) => {
                memory::weights_bytes(&slot.spec.path, self.config.quantization)
                    + l.kv.budget_bytes
                    + memory::SCRATCH_BYTES
            }
            Served::Embed(_) => {
                memory::weights_bytes(&slot.spec.path, self.config.quantization)
                    + memory::SCRATCH_BYTES
            }
        };
        slot.lifecycle.loads.fetch_add(1, Ordering::Relaxed);
        *lock(&slot.lifecycle.load_seconds) += seconds;
        tracing::info!(model = slot.spec.id, seconds, bytes, "model loaded");
        let mut st = lock(&slot.state);
        slot.in_flight.fetch_add(1, Ordering::AcqRel);
        *st = SlotState::Loaded {
            served: Arc::clone(&served),
            bytes,
        };
        Ok(served)
    }

    fn failed(&self, slot: &Slot, message: String) -> ModelError {
        tracing::error!(model = slot.spec.id, "model load failed: {message}");
        slot.lifecycle.failures.fetch_add(1, Ordering::Relaxed);
        let e = ModelError::LoadFailed {
            model: slot.spec.id.clone(),
            message,
        };
        *lock(&slot.state) = SlotState::Failed(e.clone());
        e
    }

    /// Unloads idle models, least recently used first, until `slot` fits; waits (up to
    /// `room_timeout`) while only busy models stand in the way.
    fn make_room(&self, slot: &Slot) -> Result<(), ModelError> {
        let q = self.config.quantization;
        let need = slot.bytes(q);
        let deadline = Instant::now() + self.config.models.room_timeout;
        loop {
            let slots = self.slots();
            let resident: Vec<Resident> = slots
                .iter()
                .filter(|s| s.index != slot.index && s.presence() == Presence::Loaded)
                .map(|s| Resident {
                    index: s.index,
                    bytes: s.bytes(q),
                    busy: s.in_flight() > 0,
                    last_used: lock(&s.usage).last_used,
                })
                .collect();
            let seen = *lock(&self.signals.idle.0);
            match victims(&resident, need, self.budget, self.config.models.max_loaded) {
                Ok(v) => {
                    let mut all_gone = true;
                    for i in v {
                        // A request may have taken it since: then look again.
                        all_gone &= self.unload_slot(&slots[i], "memory");
                    }
                    if all_gone {
                        return Ok(());
                    }
                }
                Err(NoRoom::TooBig { need, budget }) => {
                    return Err(ModelError::TooBig {
                        model: slot.spec.id.clone(),
                        need,
                        budget,
                    });
                }
                Err(NoRoom::Busy) => {
                    let now = Instant::now();
                    if now >= deadline {
                        return Err(ModelError::Busy {
                            model: slot.spec.id.clone(),
                        });
                    }
                    let g = lock(&self.signals.idle.0);
                    if *g == seen {
                        let _ = self.signals.idle.1.wait_timeout(g, deadline - now);
                    }
                }
            }
        }
    }

    /// Unloads `slot` if loaded and idle; true when it is not loaded afterwards.
    pub fn unload_slot(&self, slot: &Slot, reason: &str) -> bool {
        match slot.take_if_idle() {
            Some(served) => {
                tracing::info!(model = slot.spec.id, reason, "unloading model");
                served.shutdown();
                true
            }
            None => slot.presence() != Presence::Loaded,
        }
    }

    /// Makes `slot` unload as soon as its last request ends (`/models/unload` on a busy model).
    pub fn expire_when_idle(&self, slot: &Slot) {
        lock(&slot.usage).keep_alive = KeepAlive::For(Duration::ZERO);
        // A request that ended in between left no expiry: set it, and let the reaper look.
        if slot.in_flight() == 0 {
            lock(&slot.usage).expires = Some(Instant::now());
        }
        self.signals.expiry_changed();
    }

    /// Stops every loaded model's thread (at shutdown, once requests had their time).
    pub fn shutdown_all(&self) {
        for s in self.slots() {
            if let Some(served) = s.served() {
                served.shutdown();
            }
        }
    }

    /// Unloads the idle models whose keep-alive ran out; the next expiry, if any.
    fn reap_once(&self) -> Option<Instant> {
        let now = Instant::now();
        let mut next = None;
        for s in self.slots() {
            let expires = lock(&s.usage).expires;
            match expires {
                Some(t) if t <= now => {
                    self.unload_slot(&s, "keep_alive");
                }
                Some(t) => next = Some(next.map_or(t, |n: Instant| n.min(t))),
                None => {}
            }
        }
        next
    }
}

/// The keep-alive thread: sleeps until the next expiry or a request's end, unloads what
/// expired; exits with the registry.
fn reap(registry: &Weak<ModelRegistry>, signals: &Signals) {
    let expiry = &signals.expiry;
    loop {
        let next = match registry.upgrade() {
            Some(r) => r.reap_once(),
            None => return,
        };
        let mut woken = lock(&expiry.0);
        if !*woken {
            // Wake at least every few seconds to notice the registry going away.
            let wait = next.map_or(Duration::from_secs(5), |t| {
                t.saturating_duration_since(Instant::now())
                    .min(Duration::from_secs(5))
            });
            woken = expiry
                .1
                .wait_timeout(woken, wait)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        *woken = false;
    }
}
