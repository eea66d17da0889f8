//! Multi-LoRA serving over HTTP with the real SmolLM2 and random adapters written here (GGUF and
//! PEFT): `model` selects an adapter on every generation API, `/v1/models` lists adapters with
//! their parent, an unknown name is a 404, adapters evicted beyond `--max-cpu-loras` come back
//! from disk, and loading, unloading and reloading a changed adapter under the same name while
//! requests run fails none of them, leaks no KV block, and serves the new weights (no stale
//! prefix-cache hits). Without `--enable-lora-runtime-updates` the load/unload routes are 404s.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::path::{Path, PathBuf};

use common::{MODEL, TestServer, client, error_of, metric, metrics_text, post, wait_metric};
use pagoda_gguf::{GgmlType, GgufFile};
use pagoda_model::ModelConfig;
use pagoda_server::LoraConfig;
use pagoda_testkit::lora_adapter::{
    PeftOptions, RandomLora, gguf_adapter, projection_shapes, write_peft,
};
use serde_json::{Value, json};

fn tempdir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("pagoda-lora-http-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A random rank-16 adapter on q/k/v/o (strong enough to change greedy text), as a GGUF file.
fn write_gguf(c: &ModelConfig, path: &Path, seed: u64) {
    let mut r = RandomLora::new(16, &["attn_q", "attn_k", "attn_v", "attn_output"], seed);
    r.b_range = 0.3;
    let shapes = projection_shapes(c.d_model, c.q_dim(), c.kv_dim(), c.ffn_dim);
    let t = r.tensors(c.n_layers, &shapes);
    gguf_adapter(c.architecture.name(), r.alpha, &t, GgmlType::F16)
        .write_to(path)
        .unwrap();
}

fn write_peft_dir(c: &ModelConfig, dir: &Path, seed: u64) {
    std::fs::create_dir_all(dir).unwrap();
    let mut r = RandomLora::new(8, &["ffn_gate", "ffn_up", "ffn_down"], seed);
    r.b_range = 0.3;
    let shapes = projection_shapes(c.d_model, c.q_dim(), c.kv_dim(), c.ffn_dim);
    let t = r.tensors(c.n_layers, &shapes);
    let opts = PeftOptions {
        llama_rope: Some((c.n_heads, c.n_kv_heads)),
        use_rslora: false,
        fan_in_fan_out: false,
    };
    write_peft(dir, r.rank, r.alpha, &t, opts).unwrap();
}

const PROMPT: &str = "The history of the city begins with a small settlement on the river, where traders from the north and the south met every summer to exchange";

async fn complete(c: &reqwest::Client, s: &TestServer, model: &str) -> (u16, Value) {
    let body = json!({"model": model, "prompt": PROMPT, "max_tokens": 12, "temperature": 0});
    post(c, &s.url("/v1/completions"), &body).await
}

async fn text(c: &reqwest::Client, s: &TestServer, model: &str) -> String {
    let (status, v) = complete(c, s, model).await;
    assert_eq!(status, 200, "{model}: {v}");
    v["choices"][0]["text"].as_str().unwrap().to_owned()
}

async fn lora_call(c: &reqwest::Client, s: &TestServer, path: &str, body: Value) -> (u16, Value) {
    post(c, &s.url(path), &body).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn adapters_load_unload_and_reload_under_load() {
    let dir = tempdir();
    let base = GgufFile::open(&common::model_path()).unwrap();
    let cfg = ModelConfig::from_gguf(&base).unwrap();
    let (a1, a2, b) = (dir.join("a1.gguf"), dir.join("a2.gguf"), dir.join("b"));
    write_gguf(&cfg, &a1, 1);
    write_gguf(&cfg, &a2, 2);
    write_peft_dir(&cfg, &b, 3);
    let mut config = common::config();
    config.lora = LoraConfig {
        modules: vec![("a".into(), a1.clone())],
        max_lora_rank: 64,
        max_cpu_loras: 1,
        max_loras: 2,
        runtime_updates: true,
        runtime_dir: Some(dir.clone()),
    };
    let s = TestServer::start(common::small_setup(), config);
    let c = client();

    let models = c
        .get(s.url("/v1/models"))
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap();
    let ids: Vec<(&str, Option<&str>)> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["id"].as_str().unwrap(), m["parent"].as_str()))
        .collect();
    assert_eq!(ids, [(MODEL, None), ("a", Some(MODEL))]);

    let base_text = text(&c, &s, MODEL).await;
    let a_text = text(&c, &s, "a").await;
    assert_ne!(a_text, base_text, "the adapter does not change the output");
    // Every generation API takes the adapter's name.
    let chat =
        json!({"model": "a", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4});
    assert_eq!(post(&c, &s.url("/v1/chat/completions"), &chat).await.0, 200);
    let messages =
        json!({"model": "a", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4});
    assert_eq!(post(&c, &s.url("/v1/messages"), &messages).await.0, 200);
    let responses = json!({"model": "a", "input": "Hi", "max_output_tokens": 4});
    assert_eq!(post(&c, &s.url("/v1/responses"), &responses).await.0, 200);

    let (status, v) = complete(&c, &s, "nope").await;
    assert_eq!(status, 404);
    assert_eq!(error_of(&v)["code"], "model_not_found");

    // A PEFT directory at run time; with --max-cpu-loras 1 it evicts `a`, which comes back.
    let load = json!({"lora_name": "b", "lora_path": b});
    let (status, v) = lora_call(&c, &s, "/v1/load_lora_adapter", load.clone()).await;
    assert_eq!(status, 200, "{v}");
    let (status, v) = lora_call(&c, &s, "/v1/load_lora_adapter", load).await;
    assert_eq!(status, 400, "loading twice: {v}");
    let b_text = text(&c, &s, "b").await;
    assert_ne!(b_text, base_text);
    assert_eq!(
        text(&c, &s, "a").await,
        a_text,
        "a reloaded from disk differs"
    );
    let bad = json!({"lora_name": "bad", "lora_path": dir.join("missing.gguf")});
    let (status, v) = lora_call(&c, &s, "/v1/load_lora_adapter", bad).await;
    assert_eq!(status, 400, "{v}");
    assert!(
        error_of(&v)["message"]
            .as_str()
            .unwrap()
            .contains("missing.gguf"),
        "{v}"
    );
    // Only files under --lora-dir: not the model file, not a valid adapter reached through
    // `..`; a `..` that comes back inside is fine (the resolved path is what counts).
    let outside = dir.with_extension("outside.gguf");
    std::fs::copy(&a1, &outside).unwrap();
    let back_in = format!("../{}/a1.gguf", dir.file_name().unwrap().to_string_lossy());
    let escape = format!("../{}", outside.file_name().unwrap().to_string_lossy());
    let model_file = common::model_path().to_string_lossy().into_owned();
    for (path, want) in [(model_file, 400), (escape, 400), (back_in, 200)] {
        let load = json!({"lora_name": "x", "lora_path": path});
        let (status, v) = lora_call(&c, &s, "/v1/load_lora_adapter", load).await;
        assert_eq!(status, want, "{path}: {v}");
        if want == 400 {
            assert_eq!(error_of(&v)["param"], "lora_path", "{v}");
        }
    }
    let _ = std::fs::remove_file(&outside);
    let unload = json!({"lora_name": "x"});
    assert_eq!(
        lora_call(&c, &s, "/v1/unload_lora_adapter", unload).await.0,
        200
    );

    // Under load: requests of a, b and the base run while `a` is unloaded and replaced by a
    // changed adapter under the same name.
    let mut running = Vec::new();
    for i in 0..9 {
        let (c, url) = (c.clone(), s.url("/v1/completions"));
        let model = ["a", "b", MODEL][i % 3];
        running.push(tokio::spawn(async move {
            let body = json!({"model": model, "prompt": format!("{PROMPT} {i}"), "max_tokens": 24, "temperature": 0});
            post(&c, &url, &body).await
        }));
    }
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let (status, v) = lora_call(&c, &s, "/v1/unload_lora_adapter", json!({"lora_name": "a"})).await;
    assert_eq!(status, 200, "{v}");
    // A path relative to --lora-dir.
    let reload = json!({"lora_name": "a", "lora_path": a2.file_name().unwrap().to_string_lossy()});
    let (status, v) = lora_call(&c, &s, "/v1/load_lora_adapter", reload).await;
    assert_eq!(status, 200, "{v}");
    for r in running {
        let (status, v) = r.await.unwrap();
        // A request sent after the unload and before the reload may find no `a`: a 404, never
        // a failure of a request already running.
        assert!(status == 200 || status == 404, "{status} {v}");
    }
    let new_a = text(&c, &s, "a").await;
    assert_ne!(
        new_a, a_text,
        "the changed adapter served the old outputs (stale KV?)"
    );
    let (status, v) = lora_call(
        &c,
        &s,
        "/v1/load_lora_adapter",
        json!({"lora_name": "a2", "lora_path": a2}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(text(&c, &s, "a2").await, new_a);
    assert_eq!(text(&c, &s, MODEL).await, base_text);

    let (status, v) = lora_call(
        &c,
        &s,
        "/v1/unload_lora_adapter",
        json!({"lora_name": "zzz"}),
    )
    .await;
    assert_eq!(status, 404, "{v}");
    wait_metric(&s, "pagoda:num_requests_running", 0.0).await;
    // KV blocks leaked would keep this above zero.
    wait_metric(&s, "pagoda:kv_cache_usage_perc", 0.0).await;
    let m = metrics_text(&c, &s.base).await;
    assert!(m.contains("pagoda:lora_requests_info{max_lora=\"2\",running_lora_adapters=\"\",waiting_lora_adapters=\"\"}"), "{m}");
    assert!(metric(&c, &s.base, "pagoda:lora_requests_total{lora_name=\"a2\"}").await >= 1.0);
    s.stop();
    s.join().unwrap();
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test]
async fn runtime_updates_are_off_by_default() {
    let s = TestServer::start_unloaded(common::config());
    let c = client();
    let (status, v) = post(
        &c,
        &s.url("/v1/load_lora_adapter"),
        &json!({"lora_name": "x", "lora_path": "/x"}),
    )
    .await;
    assert_eq!(status, 404, "{v}");
    error_of(&v);
    s.stop();
    s.join().unwrap();
}
