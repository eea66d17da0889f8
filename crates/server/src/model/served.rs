//! One model as the server serves it: a generation model (its engine, tokenizer, chat
//! template, tool format, LoRA adapters) or an encoder (its embedding batcher), loaded from a
//! file by [`load`], the one sequence every model of the server goes through.

use std::path::Path;
use std::sync::Arc;

use pagoda_core::SchedulingPolicy;
use pagoda_core::engine::{EngineHandle, StepTurns};
use pagoda_frontend::{ChatTemplate, Tokenizer, ToolCallFormat, ToolParserChoice};
use pagoda_model::{EngineSetup, KvReport};
use pagoda_structured::StructuredOutputs;

use crate::config::ServerConfig;
use crate::model::embedder::Embedder;
use crate::model::loader::{LoadError, LoadOptions, load_engine};

/// What a model does, as `/v1/models` lists it and a wrong endpoint is told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Task {
    Generate,
    Embed,
    /// A cross-encoder: scores of text pairs (rerank, score), no embeddings.
    Score,
}

impl Task {
    /// The task of the model at `path` without loading it (from its files).
    pub fn of_path(path: &Path) -> Self {
        if pagoda_hf::is_cross_encoder_dir(path) {
            Self::Score
        } else if pagoda_hf::is_encoder_dir(path) {
            Self::Embed
        } else {
            Self::Generate
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Generate => "generate",
            Self::Embed => "embed",
            Self::Score => "score",
        }
    }

    /// The endpoints this task serves, for the error a request of another task gets.
    pub fn serves(self) -> &'static str {
        match self {
            Self::Generate => "text generation",
            Self::Embed => "embeddings (POST /v1/embeddings)",
            Self::Score => "scores of text pairs (POST /v1/rerank, POST /v1/score)",
        }
    }
}

/// A generation model, loaded and warmed.
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
    /// Tensor parallelism's ranks and counters, for `/metrics` (more than one rank only).
    pub tensor_parallel: Option<(usize, Arc<pagoda_model::TpCounters>)>,
    /// Pipeline parallelism's stages and counters, for `/metrics` (more than one stage only).
    pub pipeline_parallel: Option<(usize, Arc<pagoda_model::PpCounters>)>,
    /// Who holds what of the model, for `/v1/models`.
    pub layout: pagoda_model::RankLayout,
    /// The model's recommended sampling (`--generation-config`), under a request's own fields.
    pub sampling_defaults: pagoda_frontend::SamplingDefaults,
    /// The engine's speculative decoding, which a request's `speculative` may only narrow.
    pub speculative: Option<pagoda_core::SpecConfig>,
}

/// A loaded model of either task. One per model, behind an `Arc`: the sizes' difference costs
/// nothing.
#[allow(clippy::large_enum_variant)]
pub enum Served {
    Generate(Loaded),
    Embed(Embedder),
}

impl Served {
    pub fn task(&self) -> Task {
        match self {
            Self::Generate(_) => Task::Generate,
            Self::Embed(e) if e.cross_encoder => Task::Score,
            Self::Embed(_) => Task::Embed,
        }
    }

    /// The longest input, in tokens.
    pub fn max_model_len(&self) -> usize {
        match self {
            Self::Generate(l) => l.engine.max_model_len(),
            Self::Embed(e) => e.max_seq_len,
        }
    }

    /// Stops the model's thread; blocks until it exits (in-flight streams end with an error).
    pub fn shutdown(&self) {
        if let Self::Generate(l) = self {
            l.engine.shutdown();
        }
        // An embedder's thread ends when the embedder is dropped (its channel closes).
    }
}

/// What loading one model takes besides its file.
pub struct LoadSettings<'a> {
    pub config: &'a ServerConfig,
    pub setup: &'a EngineSetup,
    /// The name its adapters are served beside (the primary model only has adapters).
    pub served_name: &'a str,
    /// The server's first model: it gets the LoRA adapters and the KV events publisher.
    pub primary: bool,
    /// The turns its steps take with the server's other models.
    pub turns: Arc<StepTurns>,
}

/// Loads the GGUF (or Hugging Face checkpoint directory) at `path`, starts its engine or
/// batcher and warms it; blocks (call it from a plain thread or `spawn_blocking`).
pub fn load(path: &Path, s: &LoadSettings<'_>) -> Result<Served, LoadError> {
    let config = s.config;
    if pagoda_hf::is_encoder_dir(path) {
        let mut e = Embedder::load(
            path,
            config.quantization,
            config.max_batch_tokens,
            Arc::clone(&s.turns),
        )?;
        e.model_path = path.display().to_string();
        tracing::info!(
            dim = e.dim,
            max_seq_len = e.max_seq_len,
            "embedding model loaded"
        );
        return Ok(Served::Embed(e));
    }
    let m = load_engine(
        path,
        &LoadOptions {
            setup: s.setup,
            chat_template: config.chat_template.as_deref(),
            output_buffer: config.output_buffer,
            quantization: config.quantization,
            kv_events: config.kv_events.as_ref().filter(|_| s.primary),
            turns: Some(Arc::clone(&s.turns)),
            generation_config: &config.generation_config,
        },
    )?;
    let tool_format = match config.tool_call_parser {
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
    let lora_config = if s.primary {
        config.lora.clone()
    } else {
        crate::model::loras::LoraConfig::default()
    };
    let loras = Arc::new(crate::model::loras::LoraRegistry::new(
        lora_config.clone(),
        m.config,
        s.served_name,
    ));
    for (name, path) in &lora_config.modules {
        loras
            .load(name, path)
            .map_err(|e| LoadError::Lora(e.to_string()))?;
    }
    Ok(Served::Generate(Loaded {
        sampling_defaults: m.sampling_defaults,
        loras,
        engine: m.engine,
        tokenizer: m.tokenizer,
        template: m.template,
        priority_scheduling: s.setup.scheduler.policy == SchedulingPolicy::Priority,
        speculative: s.setup.speculative.clone(),
        model_path: path.display().to_string(),
        structured: m.structured,
        tool_format,
        kv: m.report,
        prefix_caching: s.setup.enable_prefix_caching,
        kv_events: m.kv_events,
        kv_role: s
            .setup
            .kv_transfer
            .as_ref()
            .map_or_else(Default::default, |c| c.role),
        kv_transfer: s
            .setup
            .kv_transfer
            .as_ref()
            .filter(|c| c.role != pagoda_core::kv::KvRole::Both)
            .map(|c| Arc::clone(&c.counters)),
        tensor_parallel: Some(&s.setup.tensor_parallel)
            .filter(|t| t.size > 1)
            .map(|t| (t.size, Arc::clone(&t.counters))),
        pipeline_parallel: Some(&s.setup.pipeline_parallel)
            .filter(|p| p.size > 1)
            .map(|p| (p.size, Arc::clone(&p.counters))),
        layout: m.layout,
    }))
}
