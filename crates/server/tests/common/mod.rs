//! Test harness: starts the real server with the real SmolLM2 model on a pre-bound
//! 127.0.0.1:0 listener in a background thread with its own runtime (so it outlives any one
//! test's runtime), plus small HTTP helpers.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use pagoda_model::EngineSetup;
use pagoda_protocol::SseParser;
use pagoda_server::ServerConfig;
use serde_json::Value;

pub const MODEL: &str = "smol";

pub fn model_dir() -> PathBuf {
    std::env::var_os("PAGODA_MODEL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/pagoda/models")
        })
}

/// The sentence-transformers directory `dir` of the model directory, fetched by
/// `scripts/fetch-models.sh NAME` when missing (only the tests that need it fetch it).
pub fn fetched_dir(name: &str, dir: &str) -> PathBuf {
    let path = model_dir().join(dir);
    if !path.join("model.safetensors").is_file() {
        let script =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/fetch-models.sh");
        let status = std::process::Command::new("bash")
            .arg(script)
            .arg(name)
            .status()
            .unwrap();
        assert!(status.success(), "scripts/fetch-models.sh {name} failed");
    }
    path
}

pub fn model_path() -> PathBuf {
    model_dir().join("SmolLM2-135M-Instruct.Q4_1.gguf")
}

/// The tool-trained third model (Qwen2.5-Coder-0.5B-Instruct, its own Hermes-style template).
pub fn qwen_path() -> PathBuf {
    model_dir().join("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
}

/// The larger tool-trained model (Qwen2.5-Coder-1.5B-Instruct, same template as the 0.5B).
pub fn qwen_15b_path() -> PathBuf {
    model_dir().join("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf")
}

/// A small engine: a 64 MiB KV pool and a 1024-token context keep start-up fast.
pub fn small_setup() -> EngineSetup {
    EngineSetup {
        kv_cache_memory: Some(64 << 20),
        max_model_len: Some(1024),
        ..EngineSetup::default()
    }
}

pub fn config() -> ServerConfig {
    ServerConfig {
        served_model_name: MODEL.to_owned(),
        ..ServerConfig::default()
    }
}

/// A server running on its own thread; `stop` triggers the graceful shutdown.
pub struct TestServer {
    pub base: String,
    shutdown: Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
    done: Mutex<Option<std::sync::mpsc::Receiver<std::io::Result<()>>>>,
}

impl TestServer {
    pub fn start(setup: EngineSetup, config: ServerConfig) -> Self {
        Self::start_model(model_path(), setup, config)
    }

    /// A server for the model at `path`.
    pub fn start_model(path: PathBuf, setup: EngineSetup, config: ServerConfig) -> Self {
        Self::start_with(move || pagoda_server::load(&path, &setup, config).unwrap())
    }

    /// A server whose model never loads: routing, auth and connection handling without the
    /// cost of a model (generation routes answer 503).
    pub fn start_unloaded(config: ServerConfig) -> Self {
        Self::start_with(move || pagoda_server::AppState::new(config))
    }

    /// A server over the state `make` builds (on a blocking thread).
    pub fn start_with(make: impl FnOnce() -> pagoda_server::AppState + Send + 'static) -> Self {
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                let addr = listener.local_addr().unwrap();
                let state = tokio::task::spawn_blocking(make).await.unwrap();
                addr_tx.send(addr).unwrap();
                let result = pagoda_server::serve(listener, state, async move {
                    let _ = stop_rx.await;
                })
                .await;
                let _ = done_tx.send(result);
            });
        });
        let addr = addr_rx.recv().unwrap();
        Self {
            base: format!("http://{addr}"),
            shutdown: Mutex::new(Some(stop_tx)),
            done: Mutex::new(Some(done_rx)),
        }
    }

    /// The listening address, for raw-socket clients.
    pub fn addr(&self) -> std::net::SocketAddr {
        self.base.trim_start_matches("http://").parse().unwrap()
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Starts the graceful shutdown.
    pub fn stop(&self) {
        if let Some(tx) = self.shutdown.lock().unwrap().take() {
            let _ = tx.send(());
        }
    }

    /// Waits for `serve` to return (after `stop`).
    pub fn join(&self) -> std::io::Result<()> {
        let rx = self.done.lock().unwrap().take().unwrap();
        rx.recv_timeout(Duration::from_secs(60)).unwrap()
    }
}

pub fn client() -> reqwest::Client {
    reqwest::Client::new()
}

/// POSTs `body` and returns the status and the JSON answer.
pub async fn post(c: &reqwest::Client, url: &str, body: &Value) -> (u16, Value) {
    let res = c.post(url).json(body).send().await.unwrap();
    let status = res.status().as_u16();
    let text = res.text().await.unwrap();
    let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, value)
}

/// POSTs a streaming request and returns every event's data, `[DONE]` included.
pub async fn post_stream(c: &reqwest::Client, url: &str, body: &Value) -> (u16, Vec<String>) {
    let res = c.post(url).json(body).send().await.unwrap();
    let status = res.status().as_u16();
    let mut parser = SseParser::new();
    let mut events = Vec::new();
    let mut bytes = res.bytes_stream();
    while let Some(chunk) = bytes.next().await {
        events.extend(parser.feed(&chunk.unwrap()).into_iter().map(|e| e.data));
    }
    (status, events)
}

/// The JSON chunks of a stream (everything but `[DONE]`), checking `[DONE]` ends it.
pub fn chunks(events: &[String]) -> Vec<Value> {
    assert_eq!(
        events.last().map(String::as_str),
        Some("[DONE]"),
        "{events:?}"
    );
    events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect()
}

/// The Prometheus text of GET /metrics.
pub async fn metrics_text(c: &reqwest::Client, base: &str) -> String {
    c.get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// GET /metrics and read one sample's value (first line starting with `name`).
pub async fn metric(c: &reqwest::Client, base: &str, name: &str) -> f64 {
    let text = metrics_text(c, base).await;
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no metric {name} in\n{text}"))
}

/// Waits (up to 20 s) for a sample to read `want`: the engine publishes its stats after the
/// step that finished a request, so a scrape right after the response can still see it running.
pub async fn wait_metric(s: &TestServer, name: &str, want: f64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let v = metric(&client(), &s.base, name).await;
        if v == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{name} stayed at {v}, not {want}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Asserts the OpenAI error shape and returns `error`.
pub fn error_of(v: &Value) -> &serde_json::Map<String, Value> {
    let e = v["error"]
        .as_object()
        .unwrap_or_else(|| panic!("not an error body: {v}"));
    assert!(e["message"].is_string(), "{v}");
    assert!(e["type"].is_string(), "{v}");
    assert!(e.contains_key("param"), "{v}");
    assert!(e.contains_key("code"), "{v}");
    e
}
