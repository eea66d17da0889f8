//! `AppState`: what every handler shares: the configuration, metrics, the lifecycle (loading,
//! ready, draining, requests in flight) and, once loaded, the engine handle, tokenizer and chat
//! template. The model is set once, so routes answer 503 until it is loaded and warmed.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use pagoda_core::engine::{EngineHandle, HandleOptions};
use pagoda_core::{EngineRequest, SamplingParams};
use pagoda_frontend::{ChatTemplate, Tokenizer, ToolCallFormat, ToolParserChoice};
use pagoda_gguf::GgufFile;
use pagoda_model::{EngineSetup, Model};
use pagoda_structured::StructuredOutputs;
use tokio::sync::Notify;

use crate::auth;
use crate::config::ServerConfig;
use crate::error::ApiError;
use crate::metrics::Metrics;

/// Why the model could not be loaded and started.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot open model {path}: {message}")]
    Open { path: String, message: String },
    #[error("cannot build the tokenizer: {0}")]
    Tokenizer(String),
    #[error("cannot load the chat template: {0}")]
    Template(String),
    #[error("cannot load the model: {0}")]
    Model(String),
    #[error("cannot start the engine thread: {0}")]
    Thread(#[from] std::io::Error),
    #[error("warm-up request failed: {0}")]
    WarmUp(String),
    #[error("a model is already loaded")]
    AlreadyLoaded,
}

/// The model side of the server, present once loading finished.
pub struct Loaded {
    pub engine: EngineHandle,
    pub tokenizer: Arc<Tokenizer>,
    pub template: ChatTemplate,
    /// Longest prompt + generation the engine accepts.
    pub max_model_len: usize,
    pub vocab_size: usize,
    /// Whether the scheduler orders waiting requests by `priority`.
    pub priority_scheduling: bool,
    /// The model file, for `/v1/models` `root`.
    pub model_path: String,
    /// Compiles `response_format` / `structured_outputs` / tool grammars; shared with the engine.
    pub structured: Arc<StructuredOutputs>,
    /// The tool-call syntax of this model, `None` when tool calling is turned off.
    pub tool_format: Option<ToolCallFormat>,
}

struct Inner {
    config: ServerConfig,
    metrics: Metrics,
    loaded: OnceLock<Loaded>,
    draining: AtomicBool,
    in_flight: AtomicUsize,
    idle: Notify,
    created: u64,
    tenant_salt: Option<String>,
}

/// Shared by every handler; cheap to clone.
#[derive(Clone)]
pub struct AppState(Arc<Inner>);

impl AppState {
    /// A server with no model yet: `/health` answers, everything else 503 until
    /// [`AppState::load_model`] returns.
    pub fn new(config: ServerConfig) -> Self {
        let tenant_salt = config.api_key.as_deref().map(auth::tenant_salt);
        let created = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Self(Arc::new(Inner {
            config,
            metrics: Metrics::new(),
            loaded: OnceLock::new(),
            draining: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            idle: Notify::new(),
            created,
            tenant_salt,
        }))
    }

    /// Loads the GGUF at `path`, starts the engine and runs one warm-up request; blocks (call
    /// it from a plain thread or `spawn_blocking`). The server is ready when it returns `Ok`.
    pub fn load_model(&self, path: &Path, setup: &EngineSetup) -> Result<(), LoadError> {
        if self.0.loaded.get().is_some() {
            return Err(LoadError::AlreadyLoaded);
        }
        let open_err = |message: String| LoadError::Open {
            path: path.display().to_string(),
            message,
        };
        let file = Arc::new(GgufFile::open(path).map_err(|e| open_err(e.to_string()))?);
        let tokenizer =
            Arc::new(Tokenizer::from_gguf(&file).map_err(|e| LoadError::Tokenizer(e.to_string()))?);
        let template =
            ChatTemplate::from_gguf(&file, None).map_err(|e| LoadError::Template(e.to_string()))?;
        let tool_format = match self.0.config.tool_call_parser {
            ToolParserChoice::Auto => Some(if template.renders_tools() {
                ToolCallFormat::detect(template.text())
            } else {
                ToolCallFormat::Generic
            }),
            ToolParserChoice::None => None,
            ToolParserChoice::Format(f) => Some(f),
        };
        tracing::info!(
            tool_call_parser = tool_format.map_or("none", ToolCallFormat::name),
            template_renders_tools = template.renders_tools(),
            "tool calling"
        );
        let structured = Arc::new(StructuredOutputs::new(Arc::clone(&tokenizer)));
        let mut setup = setup.clone();
        setup.structured = Some(Arc::clone(&structured));
        let model = Model::load(file).map_err(|e| LoadError::Model(e.to_string()))?;
        let vocab_size = model.config().vocab_size;
        let (core, report) = pagoda_model::build_engine(model, &setup)
            .map_err(|e| LoadError::Model(e.to_string()))?;
        tracing::info!(
            num_blocks = report.num_blocks,
            max_model_len = report.max_model_len,
            "engine built"
        );
        let engine = EngineHandle::start(
            core,
            HandleOptions {
                output_buffer: self.0.config.output_buffer,
            },
        )?;
        warm_up(&engine, &tokenizer)?;
        // The token trie and llguidance's parser factory take up to a second for a large
        // vocabulary: build them off the start-up path (the first constrained request waits),
        // and only now, so they do not take a core from the weight packing above.
        let warming = Arc::clone(&structured);
        std::thread::Builder::new()
            .name("pagoda-structured-warmup".into())
            .spawn(move || {
                if let Err(e) = warming.warm_up() {
                    tracing::warn!("structured output is unavailable: {e}");
                }
            })?;
        let loaded = Loaded {
            max_model_len: engine.max_model_len(),
            engine,
            tokenizer,
            template,
            vocab_size,
            priority_scheduling: setup.scheduler.priority_scheduling,
            model_path: path.display().to_string(),
            structured,
            tool_format,
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

    /// Unix seconds when the server started (`created` of `/v1/models`).
    pub fn created(&self) -> u64 {
        self.0.created
    }

    /// The prefix-cache salt every request carries when `--api-key` is set.
    pub fn tenant_salt(&self) -> Option<&str> {
        self.0.tenant_salt.as_deref()
    }

    /// The model, or 503 while it loads.
    pub fn loaded(&self) -> Result<&Loaded, ApiError> {
        self.0
            .loaded
            .get()
            .ok_or_else(|| ApiError::unavailable("the model is still loading"))
    }

    /// Ready = loaded, warmed and not draining.
    pub fn is_ready(&self) -> bool {
        self.0.loaded.get().is_some() && !self.is_draining()
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
        self.loaded()?;
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

/// One greedy token through the whole stack, so the first client does not pay for page faults
/// in the weights and the thread pool's start-up.
fn warm_up(engine: &EngineHandle, tokenizer: &Tokenizer) -> Result<(), LoadError> {
    let mut prompt = tokenizer.encode("Hello", true, false);
    if prompt.is_empty() {
        prompt.push(0);
    }
    let mut stream = engine
        .add_request(EngineRequest {
            id: 0,
            prompt_token_ids: prompt,
            params: SamplingParams::greedy(1),
            priority: 0,
            extra_keys: Default::default(),
        })
        .map_err(|e| LoadError::WarmUp(e.to_string()))?;
    while let Some(item) = stream.blocking_recv() {
        let out = item.map_err(|e| LoadError::WarmUp(e.to_string()))?;
        if out.finish_reason.is_some() {
            break;
        }
    }
    Ok(())
}
