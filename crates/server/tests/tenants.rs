//! Tenants over HTTP, one SmolLM2 server for the binary: each test has its own tenants in one
//! `--api-keys-file`. Limits hold exactly at their numbers with 429 + Retry-After naming the
//! limit, a SIGHUP reload adds and removes keys, two tenants never share cached blocks (two keys
//! of one tenant do), per-tenant counters on `/metrics` behind `--metrics-api-key`.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::{MODEL, TestServer, client, config, error_of, small_setup};
use futures_util::StreamExt;
use serde_json::{Value, json};

const METRICS_KEY: &str = "sk-metrics";

fn keys(with_dave: bool) -> String {
    let mut entries = vec![
        json!({"key": "ka", "tenant": "alice", "max_requests_per_minute": 3}),
        json!({"key": "kb", "tenant": "bob", "max_tokens_per_minute": 100}),
        json!({"key": "kc", "tenant": "carol", "max_concurrent_requests": 1}),
        json!({"key": "kf1", "tenant": "frank"}),
        json!({"key": "kf2", "tenant": "frank"}),
        json!({"key": "kg", "tenant": "gina", "priority": 2}),
        json!({"key": "kops", "tenant": "ops", "scopes": ["admin"]}),
    ];
    if with_dave {
        entries.push(json!({"key": "kd", "tenant": "dave"}));
    } else {
        entries.push(json!({"key": "ke", "tenant": "erin"}));
    }
    json!({ "keys": entries }).to_string()
}

fn keys_path() -> PathBuf {
    std::env::temp_dir().join(format!("pagoda-tenants-test-{}.json", std::process::id()))
}

fn server() -> &'static TestServer {
    static S: OnceLock<TestServer> = OnceLock::new();
    S.get_or_init(|| {
        std::fs::write(keys_path(), keys(true)).unwrap();
        let mut setup = small_setup();
        setup.scheduler.policy = pagoda_core::SchedulingPolicy::Fair;
        TestServer::start(
            setup,
            pagoda_server::ServerConfig {
                api_keys_file: Some(keys_path()),
                metrics_api_key: Some(METRICS_KEY.into()),
                ..config()
            },
        )
    })
}

struct Answer {
    status: u16,
    retry_after: Option<String>,
    body: Value,
}

async fn complete(key: &str, prompt: &str, max_tokens: u32) -> Answer {
    let res = reqwest::Client::new()
        .post(server().url("/v1/completions"))
        .bearer_auth(key)
        .json(
            &json!({"model": MODEL, "prompt": prompt, "max_tokens": max_tokens,
                      "temperature": 0, "ignore_eos": true}),
        )
        .send()
        .await
        .unwrap();
    let status = res.status().as_u16();
    let retry_after = res
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    let body = res.json().await.unwrap();
    Answer {
        status,
        retry_after,
        body,
    }
}

fn assert_over(a: &Answer, limit: &str, value: u64) {
    assert_eq!(a.status, 429, "{}", a.body);
    let msg = error_of(&a.body)["message"].as_str().unwrap();
    assert!(msg.contains(&format!("{limit} of {value}")), "{msg}");
    let secs: u64 = a.retry_after.as_deref().unwrap().parse().unwrap();
    assert!((1..=60).contains(&secs), "Retry-After {secs}");
}

async fn metrics(key: Option<&str>) -> (u16, String) {
    let mut req = reqwest::Client::new().get(server().url("/metrics"));
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    let res = req.send().await.unwrap();
    (res.status().as_u16(), res.text().await.unwrap())
}

fn sample(text: &str, line_start: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(line_start))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {line_start} in\n{text}"))
}

#[tokio::test]
async fn requests_per_minute_hold_at_their_number() {
    for i in 0..3 {
        let a = complete("ka", "Hello", 1).await;
        assert_eq!(a.status, 200, "request {i}: {}", a.body);
    }
    let a = complete("ka", "Hello", 1).await;
    assert_over(&a, "max_requests_per_minute", 3);
    // Another tenant is not affected, and the refusal is counted under alice's name.
    assert_eq!(complete("kf1", "Hello", 1).await.status, 200);
    let (_, text) = metrics(Some(METRICS_KEY)).await;
    assert_eq!(
        sample(&text, "pagoda:tenant_requests_total{tenant=\"alice\"}"),
        3.0
    );
    let limited =
        "pagoda:tenant_rate_limited_total{tenant=\"alice\",limit=\"max_requests_per_minute\"}";
    assert_eq!(sample(&text, limited), 1.0);
    assert!(!text.contains("ka\""), "keys never show");
}

#[tokio::test]
async fn tokens_per_minute_hold_at_their_number() {
    // Prompt and generated tokens count; a request passes while what it adds fits in 100.
    let first = complete("kb", "Tell me a story", 4).await;
    assert_eq!(first.status, 200, "{}", first.body);
    let usage = &first.body["usage"];
    let prompt = usage["prompt_tokens"].as_u64().unwrap();
    let mut used = usage["total_tokens"].as_u64().unwrap();
    let mut refused = false;
    for _ in 0..40 {
        let a = complete("kb", "Tell me a story", 4).await;
        if used + prompt > 100 {
            assert_over(&a, "max_tokens_per_minute", 100);
            refused = true;
            break;
        }
        assert_eq!(a.status, 200, "used {used} + {prompt}: {}", a.body);
        used += a.body["usage"]["total_tokens"].as_u64().unwrap();
    }
    assert!(refused);
    let (_, text) = metrics(Some(METRICS_KEY)).await;
    let tokens = sample(&text, "pagoda:tenant_prompt_tokens_total{tenant=\"bob\"}")
        + sample(
            &text,
            "pagoda:tenant_generation_tokens_total{tenant=\"bob\"}",
        );
    assert_eq!(tokens, used as f64);
}

#[tokio::test]
async fn concurrent_requests_hold_at_their_number() {
    let res = reqwest::Client::new()
        .post(server().url("/v1/completions"))
        .bearer_auth("kc")
        .json(&json!({"model": MODEL, "prompt": "Once", "max_tokens": 200,
                      "ignore_eos": true, "stream": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let mut body = res.bytes_stream();
    body.next().await.unwrap().unwrap(); // running
    let a = complete("kc", "Hi", 1).await;
    assert_over(&a, "max_concurrent_requests", 1);
    drop(body); // the client goes away: its slot frees
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let a = complete("kc", "Hi", 1).await;
        if a.status == 200 {
            break;
        }
        assert_over(&a, "max_concurrent_requests", 1);
        assert!(Instant::now() < deadline, "the slot never freed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn tenants_never_share_cached_blocks() {
    // Long enough for several full blocks; unique to this test.
    let prompt = "The quick brown fox jumps over the lazy dog. ".repeat(12) + "frank-gina";
    let cached = |a: &Answer| {
        assert_eq!(a.status, 200, "{}", a.body);
        a.body["usage"]["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap_or(0)
    };
    assert_eq!(cached(&complete("kf1", &prompt, 1).await), 0);
    // The same tenant through its other key shares the cache...
    assert!(cached(&complete("kf2", &prompt, 1).await) > 0);
    // ...another tenant never does.
    assert_eq!(cached(&complete("kg", &prompt, 1).await), 0);
}

#[tokio::test]
async fn sighup_reload_adds_and_removes_keys() {
    assert_eq!(complete("kd", "Hi", 1).await.status, 200);
    assert_eq!(complete("ke", "Hi", 1).await.status, 401);
    std::fs::write(keys_path(), keys(false)).unwrap();
    let pid = std::process::id().to_string();
    let ok = std::process::Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .unwrap();
    assert!(ok.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    while complete("ke", "Hi", 1).await.status != 200 {
        assert!(Instant::now() < deadline, "the new key never worked");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let gone = complete("kd", "Hi", 1).await;
    assert_eq!(gone.status, 401, "{}", gone.body);
    // The keys other tests use were kept.
    assert_eq!(complete("kf1", "Hi", 1).await.status, 200);
}

#[tokio::test]
async fn metrics_need_their_key_or_an_admin_one_and_api_keys_do_not_open_them() {
    assert_eq!(metrics(None).await.0, 401);
    assert_eq!(metrics(Some("kf1")).await.0, 401);
    // An operator's `admin`-scoped key reads them too (issue 37: metrics under `admin`).
    assert_eq!(metrics(Some("kops")).await.0, 200);
    let (st, text) = metrics(Some(METRICS_KEY)).await;
    assert_eq!(st, 200);
    assert!(text.contains("pagoda:tenant_requests_running{tenant=\"gina\"}"));
    // And a request with no key, or a wrong one, is refused on the API.
    assert_eq!(complete("nope", "Hi", 1).await.status, 401);
}

/// Scopes: a file key has `inference` unless it says otherwise; the lifecycle routes need
/// `admin`, and a key with only `admin` cannot generate.
#[tokio::test]
async fn scopes_decide_who_may_load_models_and_who_may_generate() {
    let s = server();
    let c = client();
    let load = |key: &'static str| {
        c.post(s.url("/models/load"))
            .bearer_auth(key)
            .json(&json!({"model": common::MODEL}))
            .send()
    };
    assert_eq!(load("ka").await.unwrap().status(), 403);
    let ok = load("kops").await.unwrap();
    assert_eq!(ok.status(), 200, "{:?}", ok.text().await);
    let chat = c
        .post(s.url("/v1/chat/completions"))
        .bearer_auth("kops")
        .json(&json!({"model": common::MODEL, "max_tokens": 1,
                      "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(chat.status(), 403);
    let body: serde_json::Value = chat.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`inference` scope"),
        "{body}"
    );
}
