//! `AppState`: what every handler shares: the configuration, metrics, the lifecycle (loading,
//! ready, draining, requests in flight) and, once loaded, the engine handle, tokenizer and chat
//! template. The model is set once, so routes answer 503 until it is loaded and warmed.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use pagoda_core::SchedulingPolicy;
use pagoda_core::engine::EngineHandle;
use pagoda_frontend::{ChatTemplate, Tokenizer, ToolCallFormat, ToolParserChoice};
use pagoda_model::{EngineSetup, KvReport};
use pagoda_structured::StructuredOutputs;
use tokio::sync::Notify;

use crate::api::responses::store::ResponseStore;
use crate::config::ServerConfig;
use crate::error::ApiError;
use crate::model::embedder::Embedder;
use crate::model::loader::{LoadError, LoadOptions, load_engine};
use crate::observe::metrics::engine::Metrics;
use crate::observe::otlp::{OtlpError, OtlpExporter};
use crate::prepare::validation_error::ValidationError;
use crate::tenants::key_digest::key_digest;
use crate::tenants::{KeysFileError, Reloaded, Tenants};

/// The model side of the server, present once loading finished.
pub struct Loaded {
    pub engine: EngineHandle,
    pub tokenizer: Arc<Tokenizer>,
    pub template: ChatTemplate,
    /// Whether the scheduler orders waiting requests by `priority`.
    pub priority_scheduling: bool,
    /// The model file, for `/v1/models` `root`.
    pub model_path: String,
    /// Compiles `response_format` / `structured_outputs` / tool grammars, once per request.
    pub structured: Arc<StructuredOutputs>,
    /// The tool-call syntax of this model, `None` when tool calling is turned off.
    pub tool_format: Option<ToolCallFormat>,
    /// The KV pool as sized, for `cache_config_info`.
    pub kv: KvReport,
    pub prefix_caching: bool,
    /// Publishes KV cache events (`--kv-events-config`); its overflow count is a metric.
    pub kv_events: Option<pagoda_kv_events::KvEventsPublisher>,
    /// The LoRA adapters served over the model.
    pub loras: Arc<crate::model::loras::LoraRegistry>,
    /// This replica's part in prefill/decode disaggregation (`--kv-role`).
    pub kv_role: pagoda_core::kv::KvRole,
    /// The transfers' counters, for `/metrics` (a prefill or decode role only).
    pub kv_transfer: Option<Arc<pagoda_model::KvTransferCounters>>,
}

struct Inner {
    config: ServerConfig,
    metrics: Arc<Metrics>,
    loaded: OnceLock<Loaded>,
    /// Set instead of `loaded` when the model is an encoder (embeddings only).
    embedder: OnceLock<Embedder>,
    draining: AtomicBool,
    in_flight: AtomicUsize,
    idle: Notify,
    created: u64,
    tenants: Tenants,
    metrics_key: Option<[u8; 16]>,
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
        let (entries, max_age) = (config.response_store_entries, config.response_store_max_age);
        let created = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Self(Arc::new(Inner {
            config,
            metrics: Arc::new(Metrics::new()),
            loaded: OnceLock::new(),
            embedder: OnceLock::new(),
            draining: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            idle: Notify::new(),
            created,
            tenants,
            metrics_key,
            otlp,
            responses: ResponseStore::new(entries, max_age),
        }))
    }

    /// Loads the GGUF (or Hugging Face checkpoint directory) at `path`, starts the engine and runs one warm-up request; blocks (call
    /// it from a plain thread or `spawn_blocking`). The server is ready when it returns `Ok`.
    pub fn load_model(&self, path: &Path, setup: &EngineSetup) -> Result<(), LoadError> {
        if self.0.loaded.get().is_some() || self.0.embedder.get().is_some() {
            return Err(LoadError::AlreadyLoaded);
        }
        if pagoda_hf::is_encoder_dir(path) {
            let mut e = Embedder::load(
                path,
                self.0.config.quantization,
                self.0.config.max_batch_tokens,
            )?;
            e.model_path = path.display().to_string();
            tracing::info!(
                dim = e.dim,
                max_seq_len = e.max_seq_len,
                "embedding model loaded"
            );
            return self.0.embedder.set(e).map_err(|_| LoadError::AlreadyLoaded);
        }
        let m = load_engine(
            path,
            &LoadOptions {
                setup,
                chat_template: self.0.config.chat_template.as_deref(),
                output_buffer: self.0.config.output_buffer,
                quantization: self.0.config.quantization,
                kv_events: self.0.config.kv_events.as_ref(),
            },
        )?;
        let tool_format = match self.0.config.tool_call_parser {
            ToolParserChoice::Auto => Some(if m.template.renders_tools() {
                ToolCallFormat::detect(m.template.text())
            } else {
                ToolCallFormat::Generic
            }),
            ToolParserChoice::None => None,
            ToolParserChoice::Format(f) => Some(f),
        };
        tracing::info!(
            tool_call_parser = tool_format.map_or("none", ToolCallFormat::name),
            template_renders_tools = m.template.renders_tools(),
            "tool calling"
        );
        // The token trie and llguidance's parser factory take up to a second for a large
        // vocabulary: build them off the start-up path (the first constrained request waits),
        // and only now, so they do not take a core from loading the weights.
        let warming = Arc::clone(&m.structured);
        std::thread::Builder::new()
            .name("pagoda-structured-warmup".into())
            .spawn(move || {
                if let Err(e) = warming.warm_up() {
                    tracing::warn!("structured output is unavailable: {e}");
                }
            })?;
        let loras = Arc::new(crate::model::loras::LoraRegistry::new(
            self.0.config.lora.clone(),
            m.config,
            &self.0.config.served_model_name,
        ));
        for (name, path) in &self.0.config.lora.modules {
            loras
                .load(name, path)
                .map_err(|e| LoadError::Lora(e.to_string()))?;
        }
        let loaded = Loaded {
            loras,
            engine: m.engine,
            tokenizer: m.tokenizer,
            template: m.template,
            priority_scheduling: setup.scheduler.policy == SchedulingPolicy::Priority,
            model_path: path.display().to_string(),
            structured: m.structured,
            tool_format,
            kv: m.report,
            prefix_caching: setup.enable_prefix_caching,
            kv_events: m.kv_events,
            kv_role: setup
                .kv_transfer
                .as_ref()
                .map_or_else(Default::default, |c| c.role),
            kv_transfer: setup
                .kv_transfer
                .as_ref()
                .filter(|c| c.role != pagoda_core::kv::KvRole::Both)
                .map(|c| Arc::clone(&c.counters)),
        };
        self.0
            .loaded
            .set(loaded)
            .map_err(|_| LoadError::AlreadyLoaded)
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

    /// The Responses API's stored responses.
    pub fn responses(&self) -> &ResponseStore {
        &self.0.responses
    }

    /// The generation model, or 503 while it loads (400 when the model serves embeddings).
    pub fn loaded(&self) -> Result<&Loaded, ApiError> {
        if let Some(l) = self.0.loaded.get() {
            return Ok(l);
        }
        if let Some(e) = self.0.embedder.get() {
            return Err(ValidationError::WrongTask {
                model: self.config().served_model_name.clone(),
                serves: if e.cross_encoder {
                    "scores of text pairs (POST /v1/rerank, POST /v1/score)"
                } else {
                    "embeddings (POST /v1/embeddings)"
                },
                endpoint: "generation (completions, chat, tokenize)",
            }
            .into());
        }
        Err(ApiError::unavailable("the model is still loading"))
    }

    /// The embedding model, or 503 while it loads (400 when the model generates text or is a
    /// cross-encoder, which has no embeddings).
    pub fn embedder(&self) -> Result<&Embedder, ApiError> {
        const ENDPOINT: &str = "embeddings (POST /v1/embeddings, POST /embed)";
        let e = self.encoder_for(ENDPOINT)?;
        if e.cross_encoder {
            return Err(ValidationError::WrongTask {
                model: self.config().served_model_name.clone(),
                serves: "scores of text pairs (POST /v1/rerank, POST /v1/score)",
                endpoint: ENDPOINT,
            }
            .into());
        }
        Ok(e)
    }

    /// The encoder (embedding model or cross-encoder) for `endpoint`, or 503 while it loads
    /// (400 naming `endpoint` when the model generates text).
    pub fn encoder_for(&self, endpoint: &'static str) -> Result<&Embedder, ApiError> {
        if let Some(e) = self.0.embedder.get() {
            return Ok(e);
        }
        if self.0.loaded.get().is_some() {
            return Err(ValidationError::WrongTask {
                model: self.config().served_model_name.clone(),
                serves: "text generation",
                endpoint,
            }
            .into());
        }
        Err(ApiError::unavailable("the model is still loading"))
    }

    fn is_loaded(&self) -> bool {
        self.0.loaded.get().is_some() || self.0.embedder.get().is_some()
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

    /// Admits a generation request: 503 while loading or draining. The guard counts it in
    /// flight until dropped (for a stream: when the stream ends or the client goes away).
    pub fn admit(&self) -> Result<InFlight, ApiError> {
        if self.is_draining() {
            return Err(ApiError::unavailable("the server is shutting down"));
        }
        if !self.is_loaded() {
            return Err(ApiError::unavailable("the model is still loading"));
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

    /// Stops the engine thread (in-flight streams end with an error). Blocks until it exits.
    pub fn shutdown_engine(&self) {
        if let Some(l) = self.0.loaded.get() {
            l.engine.shutdown();
        }
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
