//! `ServerConfig`: the HTTP-side settings (model name, API key, body limit, drain and
//! slow-client timeouts, the tool-call and reasoning parsers),
//! resolved values only; the command line that fills it lives in the `pagoda` binary.

use std::time::Duration;

use pagoda_frontend::{ReasoningParser, ToolParserChoice};

/// Settings of the HTTP layer. The engine's own knobs are in `pagoda_model::EngineSetup`.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// The id clients put in `model` and `/v1/models` lists.
    pub served_model_name: String,
    /// When set, every `/v1/*`, `/tokenize` and `/detokenize` request needs
    /// `Authorization: Bearer <key>`; the prefix-cache salt is then derived from the key.
    pub api_key: Option<String>,
    /// API keys of several tenants, each with its limits (`tenants::keys_file`); reloaded on
    /// SIGHUP. Combines with `api_key` (tenant `default`).
    pub api_keys_file: Option<std::path::PathBuf>,
    /// When set, `/metrics` needs `Authorization: Bearer <key>` with this key.
    pub metrics_api_key: Option<String>,
    /// `Vllm`: `/metrics` also exports vLLM's names for the series vLLM has.
    pub metrics_compat: crate::observe::metrics::compat::MetricsCompat,
    /// Origins browsers may call the API from (`*`: any); empty turns CORS off.
    pub allowed_origins: Vec<String>,
    /// OTLP/HTTP traces endpoint (`http://host:4318/v1/traces`): a span per generation request
    /// with its queue, prefill and decode phases.
    pub otlp_traces_endpoint: Option<String>,
    /// Bodies over this many bytes are answered 413.
    pub max_request_bytes: usize,
    /// On shutdown, in-flight requests get this long to finish before they are cut off.
    pub shutdown_timeout: Duration,
    /// A connection whose request headers have not all arrived this long after it opened (or
    /// after the first byte of a keep-alive request) is closed without an answer.
    pub request_header_timeout: Duration,
    /// After a response, the connection is closed unless a byte of the next request arrives
    /// within this long.
    pub keep_alive_timeout: Duration,
    /// A request body that has not all arrived this long after its headers is answered 408 and
    /// its connection closed: a client trickling a body would otherwise hold the connection
    /// (and its buffer) for as long as it likes, since no timer runs while a request is in flight.
    pub request_body_timeout: Duration,
    /// Outputs buffered per request before a reader that fell behind is cut off.
    pub output_buffer: usize,
    /// How tool calls are written and parsed: from the chat template (`Auto`), a fixed format,
    /// or `None` (requests with `tools` are refused).
    pub tool_call_parser: ToolParserChoice,
    /// Splits `<think>` reasoning from the content of chat answers.
    pub reasoning_parser: ReasoningParser,
    /// A Jinja chat template replacing the model's (`--chat-template`).
    pub chat_template: Option<String>,
    /// The Responses API's store keeps at most this many responses (the oldest go first).
    pub response_store_entries: usize,
    /// ... each for at most this long.
    pub response_store_max_age: Duration,
    /// What a Hugging Face checkpoint's matrices are quantized to at load.
    pub quantization: pagoda_hf::Quantization,
    /// An embedding model's forward passes take at most this many tokens (`--max-batch-tokens`,
    /// TEI's name); bigger requests are cut into several passes, so short ones fit between.
    pub max_batch_tokens: usize,
    /// Publish KV cache events over ZeroMQ (`--kv-events-config`, docs/scale-out.md).
    pub kv_events: Option<pagoda_kv_events::KvEventsConfig>,
    /// LoRA adapters: the ones loaded at start-up and how many are kept.
    pub lora: crate::model::loras::LoraConfig,
    /// What an unknown top-level request parameter gets (`--unknown-fields`); unknown keys
    /// inside messages and tools are always ignored (`prepare/field_policy.rs`).
    pub unknown_fields: crate::prepare::field_policy::UnknownFields,
    /// Several models: the memory budget, how many stay loaded and for how long.
    pub models: crate::model::models_config::ModelsConfig,
    /// The decode replicas a prefill replica may ship KV to (`--kv-transfer-peers`); a
    /// request naming another destination is refused before any connection.
    pub kv_transfer_peers: crate::prepare::kv_peers::KvPeers,
    /// The key `/models/load` and `/models/unload` need when API keys are set
    /// (`--admin-api-key`); without it those routes are refused whenever keys are set.
    pub admin_api_key: Option<String>,
    /// Where the model's sampling defaults come from (`--generation-config`): a request's own
    /// fields win over them, and they over the server's (temperature 1, no top-p/top-k).
    pub generation_config: pagoda_frontend::GenerationConfigChoice,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            served_model_name: "pagoda".to_owned(),
            api_key: None,
            api_keys_file: None,
            metrics_api_key: None,
            metrics_compat: Default::default(),
            allowed_origins: Vec::new(),
            otlp_traces_endpoint: None,
            max_request_bytes: 8 * 1024 * 1024,
            shutdown_timeout: Duration::from_secs(30),
            request_header_timeout: Duration::from_secs(10),
            // uvicorn's (and so vLLM's) default.
            keep_alive_timeout: Duration::from_secs(5),
            request_body_timeout: Duration::from_secs(30),
            output_buffer: 1024,
            tool_call_parser: ToolParserChoice::Auto,
            reasoning_parser: ReasoningParser::None,
            chat_template: None,
            response_store_entries: 1024,
            response_store_max_age: Duration::from_secs(3600),
            quantization: pagoda_hf::Quantization::default(),
            max_batch_tokens: crate::model::embedder::DEFAULT_MAX_BATCH_TOKENS,
            kv_events: None,
            lora: crate::model::loras::LoraConfig::default(),
            unknown_fields: Default::default(),
            models: Default::default(),
            kv_transfer_peers: Default::default(),
            admin_api_key: None,
            generation_config: Default::default(),
        }
    }
}
