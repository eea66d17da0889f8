//! `/metrics` keeps its families: every `# TYPE` line (name and type) and every sample name of a
//! tiny random model's server with each family-adding feature on, compared with the checked-in
//! lists in tests/fixtures/ (scrapers such as Prometheus, the Inference Extension and llm-d
//! read these names). `PAGODA_BLESS_METRICS=1` rewrites the lists after a deliberate change.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{TestServer, client, post};
use pagoda_core::{NumSpecTokens, SpecConfig, SpecMethod};
use pagoda_gguf::{GgmlType, GgufFile};
use pagoda_model::{EngineSetup, KvDiskConfig, KvTransferConfig, ModelConfig};
use pagoda_server::LoraConfig;
use pagoda_server::MetricsCompat;
use pagoda_server::ServerConfig;
use pagoda_testkit::lora_adapter::{RandomLora, gguf_adapter, projection_shapes};
use pagoda_testkit::metrics_names;
use pagoda_testkit::tiny_model::TinyModel;
use serde_json::json;

const API_KEY: &str = "metrics-names-key";

use pagoda_testkit::free_port;

/// A tiny llama, a LoRA adapter for it, and a disk-tier directory under `dir`.
fn write_model(dir: &Path) -> (PathBuf, PathBuf) {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir.join("kv")).unwrap();
    let model = dir.join("tiny.gguf");
    std::fs::write(&model, TinyModel::llama().to_bytes()).unwrap();
    let c = ModelConfig::from_gguf(&GgufFile::open(&model).unwrap()).unwrap();
    let r = RandomLora::new(4, &["attn_q", "attn_v"], 1);
    let shapes = projection_shapes(c.d_model, c.q_dim(), c.kv_dim(), c.ffn_dim);
    let adapter = dir.join("a.gguf");
    gguf_adapter(
        c.architecture.name(),
        r.alpha,
        &r.tensors(c.n_layers, &shapes),
        GgmlType::F16,
    )
    .write_to(&adapter)
    .unwrap();
    (model, adapter)
}

/// A server with speculative decoding, the KV disk tier, KV transfer (prefill role), KV events,
/// an API key (tenants) and a LoRA adapter: every optional family on `/metrics`.
fn start(dir: &Path, compat: MetricsCompat) -> TestServer {
    let (model, adapter) = write_model(dir);
    let setup = EngineSetup {
        kv_cache_memory: Some(16 << 20),
        max_model_len: Some(256),
        speculative: Some(SpecConfig {
            method: SpecMethod::Ngram { min_n: 1, max_n: 3 },
            num_speculative_tokens: NumSpecTokens::Fixed(3),
        }),
        kv_disk: Some(KvDiskConfig {
            dir: dir.join("kv"),
            max_bytes: 64 << 20,
            model_identity: String::new(),
            read_bytes_per_sec: None,
            prefill_tokens_per_sec: None,
        }),
        kv_transfer: Some(KvTransferConfig {
            role: pagoda_core::kv::KvRole::Prefill,
            listen: format!("127.0.0.1:{}", free_port()),
            timeout: Duration::from_secs(5),
            buffer_bytes: 16 << 20,
            ttl: Duration::from_secs(30),
            model_identity: String::new(),
            secret: None,
            counters: Default::default(),
        }),
        ..EngineSetup::default()
    };
    let config = ServerConfig {
        served_model_name: common::MODEL.to_owned(),
        api_key: Some(API_KEY.to_owned()),
        metrics_compat: compat,
        kv_events: Some(pagoda_kv_events::KvEventsConfig {
            enable_kv_cache_events: true,
            publisher: "zmq".into(),
            endpoint: format!("tcp://127.0.0.1:{}", free_port()),
            ..Default::default()
        }),
        lora: LoraConfig {
            modules: vec![("a".into(), adapter)],
            max_lora_rank: 16,
            max_cpu_loras: 0,
            max_loras: 1,
            runtime_updates: false,
            runtime_dir: None,
        },
        ..ServerConfig::default()
    };
    TestServer::start_model(model, setup, config)
}

/// Compares `text`'s names and types with tests/fixtures/`file`.
fn check(text: &str, file: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(file);
    if let Err(e) = metrics_names::check(text, &path) {
        panic!("{e}");
    }
}

async fn scrape(s: &TestServer) -> String {
    let c = client();
    // One generation with the adapter, so per-request series have values (and the key's
    // tenant has counted something).
    let body = json!({
        "model": "a",
        "prompt": [5, 17, 29, 41, 5, 17, 29, 41],
        "max_tokens": 8,
        "temperature": 0,
        "ignore_eos": true,
    });
    let res = c
        .post(s.url("/v1/completions"))
        .bearer_auth(API_KEY)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200, "{}", res.text().await.unwrap());
    let _ = post(&c, &s.url("/v1/completions"), &json!({})).await;
    let res = c
        .get(s.url("/metrics"))
        .bearer_auth(API_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    res.text().await.unwrap()
}

#[tokio::test]
async fn metrics_names_and_types_are_kept() {
    let dir = std::env::temp_dir().join(format!("pagoda-metrics-names-{}", std::process::id()));
    let s = start(&dir.join("pagoda"), MetricsCompat::Pagoda);
    check(&scrape(&s).await, "metrics_names.txt");
    s.stop();
    s.join().unwrap();
    let s = start(&dir.join("vllm"), MetricsCompat::Vllm);
    check(&scrape(&s).await, "metrics_names_vllm.txt");
    s.stop();
    s.join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
