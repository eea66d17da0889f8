//! `AppState`: what every handler shares: the configuration, metrics, the lifecycle (ready,
//! draining, requests in flight) and the models served (`model::registry`), which a request
//! takes a lease on by name. `/ready` waits for the default model.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use pagoda_model::EngineSetup;
use tokio::sync::Notify;

use crate::api::responses::store::ResponseStore;
use crate::config::ServerConfig;
use crate::error::ApiError;
use crate::http::wire_request::WireRequest;
use crate::model::keep_alive::KeepAlive;
use crate::model::lease::ModelLease;
use crate::model::registry::{ModelError, ModelRegistry, ModelSpec};
use crate::observe::metrics::engine::Metrics;
use crate::observe::otlp::{OtlpError, OtlpExporter};
use crate::prepare::validation_error::ValidationError;
use crate::tenants::key_digest::key_digest;
use crate::tenants::{KeysFileError, Reloaded, Tenants};

pub use crate::model::served::Loaded;

struct Inner {
    config: ServerConfig,
    metrics: Arc<Metrics>,
    /// The models served, loaded on demand.
    models: Arc<ModelRegistry>,
    draining: AtomicBool,
    in_flight: AtomicUsize,
    idle: Notify,
    created: u64,
    tenants: Tenants,
    metrics_key: Option<[u8; 16]>,
    admin_key: Option<[u8; 16]>,
    otlp: Option<Arc<OtlpExporter>>,
    responses: ResponseStore,
}

/// A configuration the server cannot start with.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("--api-keys-file: {0}")]
    Keys(#[from] KeysFileError),
    #[error("--otlp-traces-endpoint: {0}")]
    Otlp(#[from] OtlpError),
}

/// Shared by every handler; cheap to clone.
#[derive(Clone)]
pub struct AppState(Arc<Inner>);

impl AppState {
    /// A server with no model yet: `/health` answers, everything else 503 until
    /// [`AppState::load_model`] returns. A keys file that cannot be read leaves the server
    /// requiring keys it does not have (every keyed request 401) and logs why; use
    /// [`AppState::try_new`] to fail instead.
    pub fn new(config: ServerConfig) -> Self {
        match Self::try_new(config.clone()) {
            Ok(s) => s,
            Err(e) => {
                tracing::error!("{e}; refusing every request until a reload succeeds");
                let tenants =
                    Tenants::without_file(config.api_key.as_deref(), config.api_keys_file.clone());
                Self::with_parts(config, tenants, None)
            }
        }
    }

    /// A server with no model yet whose keys file (if any) has been read and whose trace
    /// exporter (if any) runs.
    pub fn try_new(config: ServerConfig) -> Result<Self, StateError> {
        let tenants = Tenants::new(config.api_key.as_deref(), config.api_keys_file.clone())?;
        let otlp = match &config.otlp_traces_endpoint {
            Some(url) => Some(Arc::new(OtlpExporter::start(url)?)),
            None => None,
        };
        Ok(Self::with_parts(config, tenants, otlp))
    }

    fn with_parts(
        mut config: ServerConfig,
        tenants: Tenants,
        otlp: Option<Arc<OtlpExporter>>,
    ) -> Self {
        // Only digests of the keys are kept.
        config.api_key = None;
        let metrics_key = config.metrics_api_key.take().map(|k| key_digest(&k));
        let admin_key = config.admin_api_key.take().map(|k| key_digest(&k));
        let (entries, max_age) = (config.response_store_entries, config.response_store_max_age);
        let created = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let models = ModelRegistry::new(config.clone());
        Self(Arc::new(Inner {
            config,
            metrics: Arc::new(Metrics::new()),
            models,
            draining: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            idle: Notify::new(),
            created,
            tenants,
            metrics_key,
            admin_key,
            otlp,
            responses: ResponseStore::new(entries, max_age),
        }))
    }

    /// Serves the GGUF (or Hugging Face checkpoint directory) at `path` as the default model,
    /// under `--served-model-name`, and loads it now; blocks (call it from a plain thread or
    /// `spawn_blocking`). The server is ready when it returns `Ok`.
    pub fn load_model(&self, path: &Path, setup: &EngineSetup) -> Result<(), ModelError> {
        self.add_model(ModelSpec {
            id: self.0.config.served_model_name.clone(),
            aliases: Vec::new(),
            path: path.to_path_buf(),
            setup: setup.clone(),
            preload: true,
        });
        self.preload_blocking()
    }

    /// Adds a model to serve (the first added is the default); false when its id or an alias
    /// is taken.
    pub fn add_model(&self, spec: ModelSpec) -> bool {
        self.0.models.add(spec)
    }

    /// Loads the default model and the ones marked `preload`; blocks. The first failure is
    /// returned (the other models still load).
    pub fn preload_blocking(&self) -> Result<(), ModelError> {
        let mut first_error = None;
        for s in self.0.models.slots() {
            if s.index != 0 && !s.spec.preload {
                continue;
            }
            match self.0.models.acquire_blocking(Some(&s.spec.id), None) {
                Ok(lease) => drop(lease),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// The models served.
    pub fn models(&self) -> &Arc<ModelRegistry> {
        &self.0.models
    }

    /// The model a request names (its `model`; none: the default), loaded and held for the
    /// request, with the request's `keep_alive`: the one way every endpoint finds its model.
    /// 400 for a bad `keep_alive`, 404 for a name not served, 503 while it cannot load yet,
    /// 500 when its load failed.
    pub async fn model_for<W: WireRequest>(&self, wire: &W) -> Result<ModelLease, ApiError> {
        let keep_alive = match wire.keep_alive() {
            None => None,
            Some(v) => Some(KeepAlive::from_json(v).ok_or_else(|| {
                ValidationError::invalid(
                    "keep_alive",
                    "a number of seconds or a duration such as \"5m\" (0 unloads, -1 keeps)",
                )
            })?),
        };
        Ok(self.0.models.acquire(wire.model(), keep_alive).await?)
    }

    pub fn config(&self) -> &ServerConfig {
        &self.0.config
    }

    pub fn metrics(&self) -> &Metrics {
        &self.0.metrics
    }

    /// The metrics, for what outlives a borrow of the state (a running generation).
    pub fn shared_metrics(&self) -> Arc<Metrics> {
        Arc::clone(&self.0.metrics)
    }

    /// Unix seconds when the server started (`created` of `/v1/models`).
    pub fn created(&self) -> u64 {
        self.0.created
    }

    /// The API keys and their tenants.
    pub fn tenants(&self) -> &Tenants {
        &self.0.tenants
    }

    /// Re-reads `--api-keys-file` (on SIGHUP); the keys in use stay on error.
    pub fn reload_tenants(&self) -> Result<Reloaded, KeysFileError> {
        self.0.tenants.reload()
    }

    /// The trace exporter of `--otlp-traces-endpoint`.
    pub fn otlp(&self) -> Option<&Arc<OtlpExporter>> {
        self.0.otlp.as_ref()
    }

    /// The digest of `--metrics-api-key`.
    pub fn metrics_key_digest(&self) -> Option<&[u8; 16]> {
        self.0.metrics_key.as_ref()
    }

    /// The digest of `--admin-api-key`.
    pub fn admin_key_digest(&self) -> Option<&[u8; 16]> {
        self.0.admin_key.as_ref()
    }

    /// The Responses API's stored responses.
    pub fn responses(&self) -> &ResponseStore {
        &self.0.responses
    }

    /// Whether the default model has loaded (it may have been unloaded since: the next
    /// request loads it again, so the server stays ready).
    fn is_loaded(&self) -> bool {
        self.0
            .models
            .default_slot()
            .is_some_and(|s| s.lifecycle.loads.load(Ordering::Relaxed) > 0)
    }

    /// Ready = loaded, warmed and not draining.
    pub fn is_ready(&self) -> bool {
        self.is_loaded() && !self.is_draining()
    }

    pub fn is_draining(&self) -> bool {
        self.0.draining.load(Ordering::Acquire)
    }

    /// From now on `/ready` and new generation requests answer 503.
    pub fn begin_drain(&self) {
        self.0.draining.store(true, Ordering::Release);
        self.0.idle.notify_waiters();
    }

    /// Admits a request: 503 while draining. The guard counts it in flight until dropped (for
    /// a stream: when the stream ends or the client goes away).
    pub fn admit(&self) -> Result<InFlight, ApiError> {
        if self.is_draining() {
            return Err(ApiError::unavailable("the server is shutting down"));
        }
        self.0.in_flight.fetch_add(1, Ordering::AcqRel);
        Ok(InFlight(self.clone()))
    }

    pub fn in_flight(&self) -> usize {
        self.0.in_flight.load(Ordering::Acquire)
    }

    /// Waits until no request is in flight, or `timeout`; true if everything finished.
    pub async fn wait_idle(&self, timeout: Duration) -> bool {
        let wait = async {
            loop {
                let notified = self.0.idle.notified();
                if self.in_flight() == 0 {
                    return;
                }
                notified.await;
            }
        };
        tokio::time::timeout(timeout, wait).await.is_ok()
    }

    /// Stops every model's thread (in-flight streams end with an error). Blocks until they exit.
    pub fn shutdown_engine(&self) {
        self.0.models.shutdown_all();
    }
}

/// One admitted request; dropping it ends its count in flight.
pub struct InFlight(AppState);

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.0.0.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.0.idle.notify_waiters();
        }
    }
}
