//! Several models in one server: Qwen 0.5B, SmolLM2 and MiniLM side by side through the
//! official `openai` client, each answer equal to a single-model server's; routing errors;
//! load on demand and eviction under a memory budget that holds two of three tiny models (a
//! model with a stream in flight is never evicted, `keep_alive: 0` unloads after its request,
//! a broken file fails its own requests only); `/models/load` and `/models/unload`; and each
//! model's `model_name` series in `/metrics`.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{TestServer, client, post};
use pagoda_model::EngineSetup;
use pagoda_server::model::registry::{ModelSpec, ModelsConfig};
use pagoda_server::{AppState, ServerConfig};
use pagoda_testkit::tiny_model::TinyModel;
use serde_json::{Value, json};

fn spec(id: &str, path: PathBuf, setup: &EngineSetup) -> ModelSpec {
    ModelSpec {
        id: id.to_owned(),
        aliases: Vec::new(),
        path,
        setup: setup.clone(),
        preload: false,
    }
}

/// A server over `specs` (the first is the default, loaded before it serves).
fn start(config: ServerConfig, specs: Vec<ModelSpec>) -> TestServer {
    TestServer::start_with(move || {
        let state = AppState::new(config);
        for s in specs {
            assert!(state.add_model(s));
        }
        // A failing default is a test's own business (it checks the answers).
        let _ = state.preload_blocking();
        state
    })
}

async fn state_of(s: &TestServer, id: &str) -> String {
    let (_, v) = get(s, "/v1/models").await;
    v["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == id)
        .map(|m| m["state"].as_str().unwrap().to_owned())
        .unwrap_or_default()
}

async fn get(s: &TestServer, path: &str) -> (u16, Value) {
    let r = client().get(s.url(path)).send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

async fn wait_state(s: &TestServer, id: &str, want: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while state_of(s, id).await != want {
        assert!(Instant::now() < deadline, "{id} never became {want}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn chat(model: &str) -> Value {
    json!({"model": model, "max_tokens": 12, "temperature": 0,
           "messages": [{"role": "user", "content": "Name three colours."}]})
}

const EMBED_INPUT: &str = "A server that holds many models.";

#[test]
fn three_real_models_answer_side_by_side_as_each_does_alone() {
    let minilm = common::fetched_dir("minilm", "all-MiniLM-L6-v2");
    let setup = common::small_setup();
    let multi = start(
        ServerConfig::default(),
        vec![
            spec("qwen", common::qwen_path(), &setup),
            spec("smol", common::model_path(), &setup),
            spec("minilm", minilm.clone(), &setup),
        ],
    );
    // The official client, three requests at once (chat on two models, embeddings on the
    // third); the other two models load on their first request.
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let script = r#"
import json, sys, concurrent.futures as cf
from openai import OpenAI
c = OpenAI(base_url=sys.argv[1], api_key="none")
msgs = [{"role": "user", "content": "Name three colours."}]
def chat(m):
    r = c.chat.completions.create(model=m, messages=msgs, max_tokens=12, temperature=0)
    assert r.model == m, r.model
    return r.choices[0].message.content
def embed():
    r = c.embeddings.create(model="minilm", input=sys.argv[2])
    return r.data[0].embedding
with cf.ThreadPoolExecutor(3) as ex:
    q, s, e = ex.submit(chat, "qwen"), ex.submit(chat, "smol"), ex.submit(embed)
    print(json.dumps({"qwen": q.result(), "smol": s.result(), "minilm": e.result()}))
"#;
    let out = Command::new(&python)
        .args(["-c", script, &multi.url("/v1"), EMBED_INPUT])
        .env("NO_PROXY", "127.0.0.1,localhost")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let together: Value = serde_json::from_slice(&out.stdout).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let c = client();
        // Routing: a chat model asked for embeddings, an unknown name.
        let (status, v) = post(
            &c,
            &multi.url("/v1/embeddings"),
            &json!({"model": "smol", "input": "x"}),
        )
        .await;
        assert_eq!(status, 400, "{v}");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(
            msg.contains("`smol`") && msg.contains("text generation"),
            "{msg}"
        );
        let (status, v) = post(&c, &multi.url("/v1/chat/completions"), &chat("minilm")).await;
        assert_eq!(status, 400, "{v}");
        let (status, v) = post(&c, &multi.url("/v1/chat/completions"), &chat("nope")).await;
        assert_eq!(status, 404, "{v}");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.contains("`qwen`") && msg.contains("`minilm`"), "{msg}");
        let (_, models) = get(&multi, "/v1/models").await;
        let tasks: Vec<(String, String, String)> = models["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                (
                    m["id"].as_str().unwrap().to_owned(),
                    m["task"].as_str().unwrap().to_owned(),
                    m["state"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        assert_eq!(
            tasks,
            [
                ("qwen".into(), "generate".into(), "loaded".into()),
                ("smol".into(), "generate".into(), "loaded".into()),
                ("minilm".into(), "embed".into(), "loaded".into()),
            ]
        );
        let metrics = common::metrics_text(&c, &multi.base).await;
        for m in ["qwen", "smol", "minilm"] {
            assert!(
                metrics.contains(&format!("pagoda:model_loaded{{model_name=\"{m}\"}} 1")),
                "{metrics}"
            );
        }
        assert!(metrics.contains(
            "pagoda:request_success_total{model_name=\"smol\",finished_reason=\"length\"} 1"
        ));
        assert_eq!(
            metrics
                .matches("# TYPE pagoda:time_to_first_token_seconds histogram")
                .count(),
            1
        );
    });
    multi.stop();
    multi.join().unwrap();
    // Each model alone: the binary's shared single-model servers (same setup, served as
    // `smol`), and a MiniLM one.
    for (id, alone) in [
        ("qwen", crate::front_apis::qwen()),
        ("smol", crate::api::server()),
    ] {
        let (status, v) = rt.block_on(post(
            &client(),
            &alone.url("/v1/chat/completions"),
            &chat(common::MODEL),
        ));
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["choices"][0]["message"]["content"], together[id], "{id}");
    }
    let alone = TestServer::start_model(
        minilm,
        setup,
        ServerConfig {
            served_model_name: "minilm".to_owned(),
            ..ServerConfig::default()
        },
    );
    let body = json!({"model": "minilm", "input": EMBED_INPUT});
    let (status, v) = rt.block_on(post(&client(), &alone.url("/v1/embeddings"), &body));
    assert_eq!(status, 200, "{v}");
    let a = v["data"][0]["embedding"].as_array().unwrap();
    let b = together["minilm"].as_array().unwrap();
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(b) {
        assert!((x.as_f64().unwrap() - y.as_f64().unwrap()).abs() < 1e-6);
    }
    alone.stop();
    alone.join().unwrap();
}

/// Three tiny models (different weights) and a broken file, in a fresh directory.
fn tiny_models(dir: &Path) -> Vec<PathBuf> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let mut paths: Vec<PathBuf> = (0..3u64)
        .map(|i| {
            let p = dir.join(format!("tiny-{i}.gguf"));
            let m = TinyModel {
                seed: 10 + i,
                ..TinyModel::llama()
            };
            std::fs::write(&p, m.to_bytes()).unwrap();
            p
        })
        .collect();
    let broken = dir.join("broken.gguf");
    std::fs::write(&broken, b"GGUF but not really").unwrap();
    paths.push(broken);
    paths
}

/// An engine setup and a memory budget with room for two of the tiny models, not three: each
/// costs its file + 4 MiB of KV + the scratch allowance.
fn room_for_two(model: &std::path::Path, room_timeout: Duration) -> (EngineSetup, ServerConfig) {
    let setup = EngineSetup {
        kv_cache_memory: Some(4 << 20),
        max_model_len: Some(256),
        ..EngineSetup::default()
    };
    let one = std::fs::metadata(model).unwrap().len()
        + (4 << 20)
        + pagoda_server::model::memory::SCRATCH_BYTES;
    let config = ServerConfig {
        models: ModelsConfig {
            memory_budget: Some(one * 5 / 2),
            room_timeout,
            ..ModelsConfig::default()
        },
        ..ServerConfig::default()
    };
    (setup, config)
}

#[test]
fn a_memory_budget_of_two_models_evicts_the_least_recently_used_idle_one() {
    let dir = std::env::temp_dir().join(format!("pagoda-models-{}", std::process::id()));
    let paths = tiny_models(&dir);
    let (setup, config) = room_for_two(&paths[0], Duration::from_secs(1));
    let ids = ["a", "b", "c", "broken"];
    let specs = ids
        .iter()
        .zip(&paths)
        .map(|(id, p)| spec(id, p.clone(), &setup))
        .collect();
    let s = start(config, specs);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let c = client();
        let url = s.url("/v1/completions");
        let complete = |m: &str, max: u32| json!({"model": m, "prompt": [1, 2, 3], "max_tokens": max, "temperature": 0});
        assert_eq!(state_of(&s, "a").await, "loaded");
        assert_eq!(state_of(&s, "b").await, "unloaded");
        let (status, v) = post(&c, &url, &complete("b", 2)).await;
        assert_eq!(status, 200, "{v}");
        // A stream on `a` keeps it busy while `c` needs room: `b` (idle) goes, `a` stays,
        // though `a` was used before `b`.
        let mut stream = c
            .post(&url)
            .json(&json!({"model": "a", "prompt": [1, 2, 3], "max_tokens": 200, "ignore_eos": true, "stream": true}))
            .send()
            .await
            .unwrap();
        assert_eq!(stream.status(), 200);
        let first = stream.chunk().await.unwrap();
        assert!(first.is_some());
        let (status, v) = post(&c, &url, &complete("c", 2)).await;
        assert_eq!(status, 200, "{v}");
        assert_eq!(state_of(&s, "b").await, "unloaded");
        assert_eq!(state_of(&s, "a").await, "loaded");
        assert_eq!(state_of(&s, "c").await, "loaded");
        let mut rest = String::new();
        while let Some(chunk) = stream.chunk().await.unwrap() {
            rest.push_str(&String::from_utf8_lossy(&chunk));
        }
        assert!(rest.contains("[DONE]") && !rest.contains("error"), "{rest}");
        // A broken file fails its own requests (500, naming it), and the others still serve.
        let (status, v) = post(&c, &url, &complete("broken", 2)).await;
        assert_eq!(status, 500, "{v}");
        assert!(v["error"]["message"].as_str().unwrap().contains("`broken`"), "{v}");
        let (status, _) = post(&c, &url, &complete("c", 2)).await;
        assert_eq!(status, 200);
        // keep_alive 0: unloaded once its request ends.
        let mut body = complete("c", 2);
        body["keep_alive"] = json!(0);
        let (status, _) = post(&c, &url, &body).await;
        assert_eq!(status, 200);
        wait_state(&s, "c", "unloaded").await;
        body["keep_alive"] = json!("soon");
        let (status, v) = post(&c, &url, &body).await;
        assert_eq!(status, 400, "{v}");
        // The lifecycle routes.
        let (status, v) = post(&c, &s.url("/models/load"), &json!({"model": "b"})).await;
        assert_eq!(status, 200, "{v}");
        assert_eq!(state_of(&s, "b").await, "loaded");
        let (status, v) = post(&c, &s.url("/models/unload"), &json!({"model": "b"})).await;
        assert_eq!(status, 200, "{v}");
        assert_eq!(state_of(&s, "b").await, "unloaded");
        let (status, _) = post(&c, &s.url("/models/unload"), &json!({"model": "zz"})).await;
        assert_eq!(status, 404);
        let metrics = common::metrics_text(&c, &s.base).await;
        assert!(metrics.contains("pagoda:model_unloads_total{model_name=\"b\"} 2"), "{metrics}");
        assert!(metrics.contains("pagoda:model_load_failures_total{model_name=\"broken\"} 1"));
    });
    s.stop();
    s.join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_lifecycle_routes_need_the_admin_key_when_keys_are_set() {
    let keys = std::env::temp_dir().join(format!("pagoda-models-keys-{}.json", std::process::id()));
    std::fs::write(&keys, r#"{"keys": [{"key": "user", "tenant": "u"}]}"#).unwrap();
    let s = TestServer::start_unloaded(ServerConfig {
        api_keys_file: Some(keys.clone()),
        admin_api_key: Some("admin".to_owned()),
        ..ServerConfig::default()
    });
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let c = client();
        let call = |key: &'static str| {
            c.post(s.url("/models/unload"))
                .bearer_auth(key)
                .json(&json!({"model": "m"}))
                .send()
        };
        // An inference key: refused; an unknown one: 401.
        assert_eq!(call("user").await.unwrap().status(), 403);
        assert_eq!(call("wrong").await.unwrap().status(), 401);
        // The admin key passes the check (no model is served: 503).
        assert_eq!(call("admin").await.unwrap().status(), 503);
    });
    s.stop();
    s.join().unwrap();
    let _ = std::fs::remove_file(&keys);
}

/// When the models in the way are all busy, a load waits for one to finish and then answers
/// 503 (the model is not evicted under its request); once one is idle the load goes through.
#[test]
fn a_load_with_only_busy_models_in_the_way_waits_then_answers_503() {
    let dir = std::env::temp_dir().join(format!("pagoda-models-busy-{}", std::process::id()));
    let paths = tiny_models(&dir);
    let (setup, config) = room_for_two(&paths[0], Duration::from_millis(300));
    let specs: Vec<ModelSpec> = ["a", "b", "c"]
        .iter()
        .zip(&paths)
        .map(|(id, p)| spec(id, p.clone(), &setup))
        .collect();
    let (tx, rx) = std::sync::mpsc::channel();
    let s = TestServer::start_with(move || {
        let state = AppState::new(config);
        for sp in specs {
            assert!(state.add_model(sp));
        }
        state.preload_blocking().unwrap();
        tx.send(state.clone()).unwrap();
        state
    });
    let state = rx.recv().unwrap();
    // Requests in flight on `a` and `b`: their leases.
    let a = state.models().acquire_blocking(Some("a"), None).unwrap();
    let b = state.models().acquire_blocking(Some("b"), None).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let c = client();
        let body = json!({"model": "c", "prompt": [1, 2, 3], "max_tokens": 1});
        let (status, v) = post(&c, &s.url("/v1/completions"), &body).await;
        assert_eq!(status, 503, "{v}");
        assert!(
            v["error"]["message"].as_str().unwrap().contains("busy"),
            "{v}"
        );
        assert_eq!(state_of(&s, "a").await, "loaded");
        assert_eq!(state_of(&s, "b").await, "loaded");
        drop(b);
        let (status, v) = post(&c, &s.url("/v1/completions"), &body).await;
        assert_eq!(status, 200, "{v}");
        assert_eq!(state_of(&s, "b").await, "unloaded");
        assert_eq!(state_of(&s, "a").await, "loaded");
    });
    drop(a);
    s.stop();
    s.join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
