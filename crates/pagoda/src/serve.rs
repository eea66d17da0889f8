//! `pagoda serve`: the OpenAI-compatible HTTP server. Binds first (so `/health` answers and
//! `/ready` says 503 while the model loads), loads and warms the model, then serves until
//! SIGTERM/SIGINT, when it drains: `/ready` and new requests get 503, in-flight requests get up
//! to `--shutdown-timeout` to finish, and the process exits 0.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use pagoda_core::config::parse_size;
use pagoda_frontend::{ReasoningParser, ToolParserChoice};
use pagoda_server::model::registry::ModelSpec;
use pagoda_server::{AppState, ServerConfig};

use crate::engine_args::{EngineArgs, positive_secs};
use crate::kv_transfer_args::KvTransferArgs;
use crate::model_path;

#[derive(Args)]
pub struct ServeArgs {
    /// GGUF model file, a Hugging Face checkpoint directory (config.json, *.safetensors,
    /// tokenizer.json), or a catalog name (`pagoda list`, fetched when missing); repeat it to
    /// serve several models, each under its file's name (the first is the default and loads at
    /// start-up, the others on their first request) [default: qwen2.5-coder:0.5b]
    #[arg(long, env = "PAGODA_MODEL", value_delimiter = ',')]
    model: Vec<PathBuf>,
    /// Also serve every GGUF file and checkpoint directory in DIR (found again on SIGHUP),
    /// loaded on their first request.
    #[arg(long, env = "PAGODA_MODELS_DIR", value_name = "DIR")]
    models_dir: Option<PathBuf>,
    /// Models (ids) loaded at start-up besides the default one.
    #[arg(long, value_delimiter = ',', value_name = "ID")]
    preload: Vec<String>,
    /// Memory all loaded models may take, weights + KV + scratch, e.g. 12GiB; the least
    /// recently used idle model is unloaded to make room [default: available memory - 2 GiB].
    #[arg(long, env = "PAGODA_MODELS_MEMORY")]
    models_memory: Option<String>,
    /// Most models loaded at once (0: as many as --models-memory holds).
    #[arg(long, env = "PAGODA_MAX_LOADED_MODELS", default_value_t = 0)]
    max_loaded_models: usize,
    /// How long an idle model stays loaded (Ollama's keep_alive: `5m`, `30s`, `0`; -1: until
    /// memory is short); a request's `keep_alive` overrides it for its model.
    #[arg(
        long,
        env = "PAGODA_KEEP_ALIVE",
        default_value = "-1",
        allow_hyphen_values = true
    )]
    keep_alive: String,
    /// With API keys set, the lifecycle routes (`POST /models/load`, `/models/unload`, the LoRA
    /// load/unload routes) need this key or a keys-file key with the `admin` scope.
    #[arg(long, env = "PAGODA_ADMIN_API_KEY", hide_env_values = true)]
    admin_api_key: Option<String>,
    /// Address to listen on.
    #[arg(long, env = "PAGODA_HOST", default_value = "127.0.0.1")]
    host: String,
    /// Port to listen on.
    #[arg(long, env = "PAGODA_PORT", default_value_t = 8000)]
    port: u16,
    /// The model id clients send in `model` [default: the model file's name without .gguf].
    #[arg(long, env = "PAGODA_SERVED_MODEL_NAME")]
    served_model_name: Option<String>,
    /// Require `Authorization: Bearer <KEY>` on the API routes; the prefix-cache salt is then
    /// derived from the key.
    #[arg(long, env = "PAGODA_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// API keys of several tenants, each with optional limits and a fair-share weight: a JSON
    /// file `{"keys": [{"key", "tenant", "max_requests_per_minute", "max_tokens_per_minute",
    /// "max_concurrent_requests", "priority"}]}`. Re-read on SIGHUP.
    #[arg(long, env = "PAGODA_API_KEYS_FILE")]
    api_keys_file: Option<PathBuf>,
    /// Require `Authorization: Bearer <KEY>` on `/metrics` (the admin key and `admin`-scoped
    /// keys are taken too).
    #[arg(long, env = "PAGODA_METRICS_API_KEY", hide_env_values = true)]
    metrics_api_key: Option<String>,
    /// `vllm`: `/metrics` also exports vLLM's names (`vllm:num_requests_waiting`,
    /// `vllm:kv_cache_usage_perc`, `vllm:cache_config_info`, ...) for the series vLLM has, for
    /// the Gateway API Inference Extension's endpoint picker, llm-d and vLLM dashboards.
    #[arg(long, env = "PAGODA_METRICS_COMPAT", default_value = "none")]
    metrics_compat: pagoda_server::MetricsCompat,
    /// What an unknown top-level request parameter gets: `reject` (400 naming it and the near
    /// known name, as OpenAI does), `warn` (ignored, logged at warn) or `ignore` (ignored, logged
    /// at debug, as vLLM does); counted in `pagoda:request_ignored_fields_total` unless refused.
    /// Unknown keys inside messages, content parts and tools are always ignored.
    #[arg(long, env = "PAGODA_UNKNOWN_FIELDS", default_value = "reject")]
    unknown_fields: pagoda_server::UnknownFields,
    /// Origins allowed to call the API from a browser, comma-separated (`*`: any); preflight
    /// `OPTIONS` requests are answered. Off by default.
    #[arg(long, env = "PAGODA_ALLOWED_ORIGINS", value_delimiter = ',')]
    allowed_origins: Vec<String>,
    /// Export OpenTelemetry traces over OTLP/HTTP (JSON) to this URL, e.g.
    /// http://localhost:4318/v1/traces: a span per generation request with its queue, prefill
    /// and decode phases, joined to the caller's trace by a W3C `traceparent` header.
    #[arg(long, env = "PAGODA_OTLP_TRACES_ENDPOINT")]
    otlp_traces_endpoint: Option<String>,
    /// Largest request body in bytes; larger ones get 413.
    #[arg(long, env = "PAGODA_MAX_REQUEST_BYTES", default_value_t = 8 * 1024 * 1024)]
    max_request_bytes: usize,
    /// Seconds in-flight requests get to finish after SIGTERM/SIGINT.
    #[arg(long, env = "PAGODA_SHUTDOWN_TIMEOUT", default_value_t = 30.0)]
    shutdown_timeout: f64,
    /// Seconds a client has to send a request's headers (from connecting, or from the first
    /// byte of a keep-alive request); slower connections are closed.
    #[arg(long, env = "PAGODA_REQUEST_HEADER_TIMEOUT", default_value_t = 10.0)]
    request_header_timeout: f64,
    /// Seconds an idle keep-alive connection is kept open between requests.
    #[arg(long, env = "PAGODA_KEEP_ALIVE_TIMEOUT", default_value_t = 5.0)]
    keep_alive_timeout: f64,
    /// Seconds a client has to send a request's whole body once its headers arrived; slower
    /// bodies are answered 408 and their connection closed.
    #[arg(long, env = "PAGODA_REQUEST_BODY_TIMEOUT", default_value_t = 30.0)]
    request_body_timeout: f64,
    /// How tool calls are written and parsed: `auto` (from the chat template: `hermes` when it
    /// mentions <tool_call>, `generic` when it ignores `tools`), `hermes`, `generic`, or `none`
    /// (requests with `tools` get 400). See docs/tool-calling.md.
    #[arg(long, env = "PAGODA_TOOL_CALL_PARSER", default_value = "auto")]
    tool_call_parser: ToolParserChoice,
    /// A Jinja chat template to use instead of the model's: a file, or the template itself
    /// (text containing `{{` or `{%` that names no file).
    #[arg(long, env = "PAGODA_CHAT_TEMPLATE")]
    chat_template: Option<String>,
    /// Split `<think>...</think>` into `reasoning_content`: `think` or `none`.
    #[arg(long, env = "PAGODA_REASONING_PARSER", default_value = "none")]
    reasoning_parser: ReasoningParser,
    /// Publish KV cache events over ZeroMQ, as vLLM's JSON: `{"enable_kv_cache_events": true,
    /// "publisher": "zmq", "endpoint": "tcp://*:5557", "replay_endpoint": "tcp://*:5558",
    /// "buffer_steps", "hwm", "max_queue_size", "topic"}` (docs/scale-out.md).
    #[arg(long, env = "PAGODA_KV_EVENTS_CONFIG")]
    kv_events_config: Option<String>,
    /// LoRA adapters served at start-up, `name=path` each (a GGUF LoRA file or a PEFT
    /// directory); a request selects one by its name in `model`.
    #[arg(long, num_args = 1.., value_name = "NAME=PATH")]
    lora_modules: Vec<String>,
    /// Highest adapter rank accepted.
    #[arg(long, env = "PAGODA_MAX_LORA_RANK", default_value_t = 64)]
    max_lora_rank: usize,
    /// Adapters kept in memory (least recently used dropped beyond it, reloaded from disk when
    /// asked for again); 0: no limit.
    #[arg(long, env = "PAGODA_MAX_CPU_LORAS", default_value_t = 0)]
    max_cpu_loras: usize,
    /// Serve POST /v1/load_lora_adapter and /v1/unload_lora_adapter (adapters from --lora-dir
    /// only).
    #[arg(
        long,
        env = "PAGODA_ENABLE_LORA_RUNTIME_UPDATES",
        requires = "lora_dir"
    )]
    enable_lora_runtime_updates: bool,
    /// The directory runtime-loaded adapters must lie in (`lora_path` relative to it, or an
    /// absolute path inside it): a client cannot make the server read any other file.
    #[arg(long, env = "PAGODA_LORA_DIR", value_name = "DIR")]
    lora_dir: Option<PathBuf>,
    /// Keep the prefix cache on disk too: blocks evicted from memory (and, at shutdown, the
    /// ones still cached) are written to DIR, read back when a prompt's prefix is there, and
    /// found again by the next server on DIR (one server per directory: a lock file).
    #[arg(long, env = "PAGODA_KV_DISK_DIR", value_name = "DIR")]
    kv_disk_dir: Option<PathBuf>,
    /// Most bytes of block files in --kv-disk-dir, e.g. 20GiB or 512MiB (least recently used
    /// deleted beyond) [default: 20GiB].
    #[arg(long, env = "PAGODA_KV_DISK_SIZE", requires = "kv_disk_dir")]
    kv_disk_size: Option<String>,
    #[command(flatten)]
    kv_transfer: KvTransferArgs,
    /// Embedding models: most tokens one forward pass runs (TEI's flag). A request with more
    /// is cut into several passes, and short requests go between them, so a query does not
    /// wait for a whole document batch.
    #[arg(long, env = "PAGODA_MAX_BATCH_TOKENS", default_value_t = pagoda_server::model::embedder::DEFAULT_MAX_BATCH_TOKENS)]
    max_batch_tokens: usize,
    #[command(flatten)]
    engine: EngineArgs,
}

pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    let mut setup = args.engine.resolve()?;
    if let Some(dir) = &args.kv_disk_dir {
        let size = args.kv_disk_size.as_deref().unwrap_or("20GiB");
        setup.kv_disk = Some(pagoda_model::KvDiskConfig {
            dir: dir.clone(),
            max_bytes: parse_size(size).context("--kv-disk-size")?,
            model_identity: String::new(), // the model file's, filled in at load
            read_bytes_per_sec: None,
            prefill_tokens_per_sec: None,
        });
    }
    let (kv_transfer, kv_transfer_peers) = args.kv_transfer.resolve()?;
    setup.kv_transfer = kv_transfer;
    let paths = match args.model.as_slice() {
        [] => vec![model_path::resolve(None, true)?],
        given => given
            .iter()
            .map(|p| model_path::resolve(Some(p.clone()), true))
            .collect::<anyhow::Result<Vec<_>>>()?,
    };
    let path = paths[0].clone();
    if setup.tensor_parallel.mpi.is_some() && paths.len() > 1 {
        anyhow::bail!("--distributed-executor-backend mpi splits one model: give one --model");
    }
    if args.engine.run_mpi_worker(&path)? {
        return Ok(());
    }
    // Several generation models share the single-model KV default, split evenly, unless
    // --kv-cache-memory sets each one's pool.
    let generators = paths
        .iter()
        .filter(|p| !pagoda_hf::is_encoder_dir(p))
        .count() as u64;
    if setup.kv_cache_memory.is_none() && generators > 1 {
        setup.kv_cache_memory = Some(pagoda_core::config::default_kv_budget() / generators);
    }
    if args.max_batch_tokens == 0 {
        anyhow::bail!("--max-batch-tokens must be at least 1");
    }
    if !(args.shutdown_timeout.is_finite() && args.shutdown_timeout >= 0.0) {
        anyhow::bail!("--shutdown-timeout must be a number of seconds >= 0");
    }
    let request_header_timeout =
        positive_secs("--request-header-timeout", args.request_header_timeout)?;
    let keep_alive_timeout = positive_secs("--keep-alive-timeout", args.keep_alive_timeout)?;
    let request_body_timeout = positive_secs("--request-body-timeout", args.request_body_timeout)?;
    let served_model_name = args
        .served_model_name
        .clone()
        .unwrap_or_else(|| model_id(&path));
    let models = models_config(&args, &setup)?;
    let mut specs = model_specs(&paths, &served_model_name, &args.preload, &setup);
    // A model given by its catalog name (`qwen2.5-coder:0.5b`) also answers to that name.
    for (spec, arg) in specs.iter_mut().zip(&args.model) {
        let typed = arg.to_string_lossy();
        if !arg.exists() && typed != spec.id {
            spec.aliases.push(typed.into_owned());
        }
    }
    let chat_template = match args.chat_template {
        Some(t) => Some(read_template(&t)?),
        None => None,
    };
    let config = ServerConfig {
        served_model_name,
        api_key: args.api_key.filter(|k| !k.is_empty()),
        api_keys_file: args.api_keys_file,
        metrics_api_key: args.metrics_api_key.filter(|k| !k.is_empty()),
        metrics_compat: args.metrics_compat,
        unknown_fields: args.unknown_fields,
        allowed_origins: args.allowed_origins,
        otlp_traces_endpoint: args.otlp_traces_endpoint,
        max_request_bytes: args.max_request_bytes,
        shutdown_timeout: Duration::from_secs_f64(args.shutdown_timeout),
        request_header_timeout,
        keep_alive_timeout,
        request_body_timeout,
        tool_call_parser: args.tool_call_parser,
        reasoning_parser: args.reasoning_parser,
        chat_template,
        quantization: args.engine.quantization()?,
        generation_config: args.engine.generation_config.clone(),
        max_batch_tokens: args.max_batch_tokens,
        kv_events: match &args.kv_events_config {
            Some(json) => pagoda_kv_events::KvEventsConfig::parse(json)?,
            None => None,
        },
        lora: pagoda_server::LoraConfig {
            modules: lora_modules(&args.lora_modules)?,
            max_lora_rank: args.max_lora_rank,
            max_cpu_loras: args.max_cpu_loras,
            max_loras: args.engine.max_loras,
            runtime_updates: args.enable_lora_runtime_updates,
            runtime_dir: args.lora_dir,
        },
        models,
        kv_transfer_peers,
        admin_api_key: args.admin_api_key.filter(|k| !k.is_empty()),
        ..ServerConfig::default()
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("pagoda-http")
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async move {
        let addr = format!("{}:{}", args.host, args.port);
        let listener = tokio::net::TcpListener::bind(&addr)
            .await
            .with_context(|| format!("cannot listen on {addr}"))?;
        let state = AppState::try_new(config)?;
        let server = tokio::spawn(pagoda_server::serve(
            listener,
            state.clone(),
            shutdown_signal(),
        ));
        eprintln!(
            "pagoda: listening on http://{addr}, loading {}",
            path.display()
        );
        for spec in specs {
            let id = spec.id.clone();
            if !state.add_model(spec) {
                anyhow::bail!(
                    "two models are served as `{id}`: give one --served-model-name or rename a file"
                );
            }
        }
        let added = state.models().rescan_dir().context("--models-dir")?;
        let loading = state.clone();
        tokio::task::spawn_blocking(move || loading.preload_blocking())
            .await
            .context("model loading panicked")?
            .with_context(|| format!("cannot load model {}", path.display()))?;
        let ids: Vec<String> = state
            .models()
            .slots()
            .iter()
            .map(|s| format!("`{}`", s.spec.id))
            .collect();
        eprintln!(
            "pagoda: ready, serving {} (default `{}`{})",
            ids.join(", "),
            state.config().served_model_name,
            if added > 0 {
                format!(", {added} from --models-dir")
            } else {
                String::new()
            }
        );
        server
            .await
            .context("the server task failed")?
            .context("the server failed")?;
        // Every engine stops (and flushes its KV disk tier) before the process exits.
        let stopping = state.clone();
        tokio::task::spawn_blocking(move || stopping.shutdown_engine())
            .await
            .context("stopping the engines panicked")?;
        eprintln!("pagoda: drained, exiting");
        anyhow::Ok(())
    })
}

/// The id a model file is served under: a checkpoint directory's whole name
/// (`Qwen2.5-0.5B`), a file's stem.
fn model_id(path: &std::path::Path) -> String {
    let name = if path.is_dir() {
        path.file_name()
    } else {
        path.file_stem()
    };
    name.map_or_else(|| "pagoda".to_owned(), |s| s.to_string_lossy().into_owned())
}

/// The models of `--model`: the first under `served_model_name` with the whole `setup`; the
/// others under their file names, without what belongs to one model only (speculative
/// decoding's draft, the KV disk tier, KV transfer).
fn model_specs(
    paths: &[PathBuf],
    served_model_name: &str,
    preload: &[String],
    setup: &pagoda_model::EngineSetup,
) -> Vec<ModelSpec> {
    let other = secondary_setup(setup);
    paths
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let id = if i == 0 {
                served_model_name.to_owned()
            } else {
                model_id(p)
            };
            ModelSpec {
                preload: i == 0 || preload.contains(&id),
                id,
                aliases: Vec::new(),
                path: p.clone(),
                setup: if i == 0 { setup.clone() } else { other.clone() },
            }
        })
        .collect()
}

/// The setup of every model but the first.
fn secondary_setup(setup: &pagoda_model::EngineSetup) -> pagoda_model::EngineSetup {
    pagoda_model::EngineSetup {
        speculative: None,
        kv_disk: None,
        kv_transfer: None,
        ..setup.clone()
    }
}

/// `--models-memory`, `--max-loaded-models`, `--keep-alive` and `--models-dir`.
fn models_config(
    args: &ServeArgs,
    setup: &pagoda_model::EngineSetup,
) -> anyhow::Result<pagoda_server::model::registry::ModelsConfig> {
    let keep_alive = pagoda_server::model::keep_alive::KeepAlive::parse(&args.keep_alive)
        .with_context(|| {
            format!(
                "--keep-alive {:?}: a duration such as 5m or 30s, 0, or -1",
                args.keep_alive
            )
        })?;
    let memory_budget = match &args.models_memory {
        Some(m) => Some(parse_size(m).context("--models-memory")?),
        None => None,
    };
    if let Some(dir) = &args.models_dir
        && !dir.is_dir()
    {
        anyhow::bail!("--models-dir {}: not a directory", dir.display());
    }
    Ok(pagoda_server::model::registry::ModelsConfig {
        memory_budget,
        max_loaded: args.max_loaded_models,
        keep_alive,
        dir: args.models_dir.clone(),
        dir_setup: secondary_setup(setup),
        ..Default::default()
    })
}

/// A timeout flag's seconds; zero would close every connection at once, so it is refused.
/// Resolves on the first SIGINT (Ctrl-C) or SIGTERM.
pub(crate) async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
    eprintln!("pagoda: shutting down, draining in-flight requests");
}

/// `--chat-template`: a file's text, or the argument itself when it is a template (as vLLM).
fn read_template(arg: &str) -> anyhow::Result<String> {
    let path = std::path::Path::new(arg);
    if path.is_file() {
        return std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the chat template {}", path.display()));
    }
    if arg.contains("{{") || arg.contains("{%") {
        return Ok(arg.to_owned());
    }
    anyhow::bail!("--chat-template: {arg:?} is neither a file nor a Jinja template")
}

/// `--lora-modules name=path ...`.
fn lora_modules(specs: &[String]) -> anyhow::Result<Vec<(String, PathBuf)>> {
    specs
        .iter()
        .map(|s| match s.split_once('=') {
            Some((name, path)) if !name.is_empty() && !path.is_empty() => {
                Ok((name.to_owned(), PathBuf::from(path)))
            }
            _ => anyhow::bail!("--lora-modules {s:?}: expected NAME=PATH"),
        })
        .collect()
}
