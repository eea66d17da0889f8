//! Loading a model into a running engine, the one sequence `pagoda serve` and `pagoda generate`
//! share: open the GGUF (or convert a Hugging Face checkpoint directory into one), build the
//! tokenizer and chat template, load and size the engine, start its thread and run one warm-up
//! token through it.

use std::path::Path;
use std::sync::Arc;

use pagoda_core::engine::{EngineHandle, HandleOptions};
use pagoda_core::{EngineRequest, SamplingParams, SpecMethod};
use pagoda_frontend::{ChatTemplate, GenerationConfigChoice, SamplingDefaults, Tokenizer};
use pagoda_gguf::GgufFile;
use pagoda_hf::Quantization;
use pagoda_kv_events::{KvEventsConfig, KvEventsPublisher};
use pagoda_model::{EngineSetup, KvReport, Model, PackCache};
use pagoda_structured::StructuredOutputs;

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
    #[error("cannot load the draft model {path}: {message}")]
    Draft { path: String, message: String },
    #[error("cannot start the engine thread: {0}")]
    Thread(#[from] std::io::Error),
    #[error("warm-up request failed: {0}")]
    WarmUp(String),
    #[error("a model is already loaded")]
    AlreadyLoaded,
    #[error(transparent)]
    KvEvents(#[from] pagoda_kv_events::PublishError),
    #[error("{0}")]
    Lora(String),
    #[error("--generation-config: {0}")]
    GenerationConfig(#[from] pagoda_frontend::GenerationConfigError),
}

/// How to load.
#[derive(Clone, Debug)]
pub struct LoadOptions<'a> {
    pub setup: &'a EngineSetup,
    /// A Jinja chat template to use instead of the model's own.
    pub chat_template: Option<&'a str>,
    /// Outputs buffered per request before a reader that fell behind is cut off.
    pub output_buffer: usize,
    /// What a Hugging Face checkpoint's matrices become (GGUF files keep their own types).
    pub quantization: Quantization,
    /// Publish KV cache events (`--kv-events-config`).
    pub kv_events: Option<&'a KvEventsConfig>,
    /// The turns the engine's steps take with other models on the machine (`None`: alone).
    pub turns: Option<Arc<pagoda_core::engine::StepTurns>>,
    /// Where the sampling defaults come from (`--generation-config`).
    pub generation_config: &'a GenerationConfigChoice,
}

/// A model serving from its own engine thread, with its text edge.
pub struct LoadedModel {
    pub engine: EngineHandle,
    pub tokenizer: Arc<Tokenizer>,
    pub template: ChatTemplate,
    /// Compiles constraints against this model's vocabulary (its token trie is built lazily).
    pub structured: Arc<StructuredOutputs>,
    pub report: KvReport,
    /// Who holds what of the model (one rank without parallelism).
    pub layout: pagoda_model::RankLayout,
    /// The KV events publisher, when on.
    pub kv_events: Option<KvEventsPublisher>,
    /// The model's hyper-parameters (adapters are checked against them).
    pub config: pagoda_model::ModelConfig,
    /// The model's recommended sampling, as `--generation-config` chose it.
    pub sampling_defaults: SamplingDefaults,
}

/// Loads the GGUF at `path` and starts its engine; blocks (call it from a plain thread or
/// `spawn_blocking`). The engine has run one token when this returns.
pub fn load_engine(path: &Path, opts: &LoadOptions<'_>) -> Result<LoadedModel, LoadError> {
    let OpenedModel {
        file,
        tokenizer,
        model,
    } = open_model(path, opts.quantization)?;
    let config = model.config().clone();
    let tokenizer = Arc::new(tokenizer);
    let template = ChatTemplate::from_gguf(&file, opts.chat_template)
        .map_err(|e| LoadError::Template(e.to_string()))?;
    let sampling_defaults = opts.generation_config.defaults_for(path, &file)?;
    tracing::info!(
        defaults = %serde_json::to_string(&sampling_defaults).unwrap_or_default(),
        "sampling defaults (a request's own fields win)"
    );
    let draft = match opts.setup.speculative.as_ref().map(|s| &s.method) {
        Some(SpecMethod::DraftModel { path }) => Some(load_draft(Path::new(path))?),
        _ => None,
    };
    // The disk tier's files belong to this model file: its identity goes into their digest.
    let mut setup = opts.setup.clone();
    if let Some(d) = &mut setup.kv_disk
        && d.model_identity.is_empty()
    {
        d.model_identity = pagoda_model::kv::disk::model_identity(path);
    }
    // Both sides of a KV transfer check they run the same model (name and size).
    if let Some(t) = &mut setup.kv_transfer
        && t.model_identity.is_empty()
    {
        t.model_identity = pagoda_model::kv::transfer::model_identity(path);
    }
    let (core, report) = pagoda_model::build_engine_with_draft(model, draft, &setup)
        .map_err(|e| LoadError::Model(e.to_string()))?;
    tracing::info!(
        num_blocks = report.num_blocks,
        max_model_len = report.max_model_len,
        "engine built"
    );
    let layout = core.executor().executor().layout();
    let (kv_events, queue) = match opts.kv_events {
        Some(c) => {
            let (publisher, queue) = KvEventsPublisher::start(c)?;
            tracing::info!(
                endpoint = publisher.endpoint,
                replay = publisher.replay_endpoint.as_deref().unwrap_or("none"),
                "publishing KV cache events"
            );
            (Some(publisher), Some(queue))
        }
        None => (None, None),
    };
    let engine = EngineHandle::start_with_events(
        core,
        HandleOptions {
            output_buffer: opts.output_buffer,
            turns: opts.turns.clone(),
        },
        queue,
    )?;
    warm_up(&engine, &tokenizer)?;
    let structured = Arc::new(StructuredOutputs::new(Arc::clone(&tokenizer)));
    Ok(LoadedModel {
        engine,
        tokenizer,
        template,
        structured,
        report,
        layout,
        kv_events,
        config,
        sampling_defaults,
    })
}

/// A model's file, tokenizer and weights, without an engine (`pagoda perplexity` uses it bare).
pub struct OpenedModel {
    pub file: Arc<GgufFile>,
    pub tokenizer: Tokenizer,
    pub model: Model,
}

/// Opens the GGUF at `path` (or converts a Hugging Face checkpoint directory into one, its
/// matrices quantized to `quantization`) and loads its tokenizer and weights.
pub fn open_model(path: &Path, quantization: Quantization) -> Result<OpenedModel, LoadError> {
    let open_err = |message: String| LoadError::Open {
        path: path.display().to_string(),
        message,
    };
    let checkpoint = pagoda_hf::is_checkpoint_dir(path);
    let file = if checkpoint {
        let started = std::time::Instant::now();
        let file = pagoda_hf::convert(path, quantization).map_err(|e| open_err(e.to_string()))?;
        tracing::info!(
            quantization = quantization.name(),
            seconds = started.elapsed().as_secs_f64(),
            "converted the Hugging Face checkpoint"
        );
        file
    } else {
        GgufFile::open(path).map_err(|e| open_err(e.to_string()))?
    };
    let file = Arc::new(file);
    let tokenizer = Tokenizer::from_gguf(&file).map_err(|e| LoadError::Tokenizer(e.to_string()))?;
    // The packed weight layout is mapped from its cache beside the model when it is valid
    // (start-up in a fraction of a second), else packed and written there for next time.
    // A converted checkpoint lives in memory only, so it has no pack cache to check against.
    let model = if checkpoint {
        Model::load(Arc::clone(&file))
    } else {
        Model::load_cached(Arc::clone(&file), path, &PackCache::from_env())
    }
    .map_err(|e| LoadError::Model(e.to_string()))?;
    Ok(OpenedModel {
        file,
        tokenizer,
        model,
    })
}

/// The draft model of speculative decoding (its vocabulary is checked against the target's
/// when the engine is built).
fn load_draft(path: &Path) -> Result<Model, LoadError> {
    let err = |message: String| LoadError::Draft {
        path: path.display().to_string(),
        message,
    };
    let file = Arc::new(GgufFile::open(path).map_err(|e| err(e.to_string()))?);
    Model::load_cached(file, path, &PackCache::from_env()).map_err(|e| err(e.to_string()))
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
            tenant: Default::default(),
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
