//! The router against two real `pagoda serve` replicas (SmolLM2, `--threads 1`, KV events on)
//! on loopback, in one test so the replicas load once: round robin alternates, a stream passes
//! through byte for byte (ids and timestamps aside), cache-aware routing sends a request to the
//! replica holding its prefix (seen in `cached_tokens`), a LoRA adapter's requests too (their
//! blocks hashed with the adapter's digest, as the engine does), unless load is skewed, a draining
//! replica gets no new requests, a replica killed mid-stream ends the client's stream with an
//! SSE error event, and a restarted replica's index is cleared and rebuilt from its events.
//! Needs the `pagoda` binary built (`cargo build -p pagoda`; a workspace test run builds it).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{MODEL_NAME, free_port, model};
use futures_util::StreamExt;
use pagoda_router::{PolicyKind, PromptTokenizer, RouterConfig, WORKER_HEADER, WorkerSpec};
use serde_json::{Value, json};

/// A replica publishing KV events, and its worker spec for the router.
struct Replica {
    proc: common::Replica,
    spec: WorkerSpec,
    ports: (u16, u16, u16),
}

impl std::ops::Deref for Replica {
    type Target = common::Replica;
    fn deref(&self) -> &common::Replica {
        &self.proc
    }
}

impl Replica {
    fn start() -> Self {
        Self::start_on(free_port(), free_port(), free_port())
    }

    /// A replica on these ports (a restart of one that died reuses its ports).
    fn start_on(port: u16, events: u16, replay: u16) -> Self {
        let kv = json!({"enable_kv_cache_events": true, "publisher": "zmq",
                        "endpoint": format!("tcp://127.0.0.1:{events}"),
                        "replay_endpoint": format!("tcp://127.0.0.1:{replay}")});
        let proc = common::Replica::spawn(
            port,
            &[
                "--shutdown-timeout".into(),
                "30".into(),
                "--kv-events-config".into(),
                kv.to_string(),
                "--lora-modules".into(),
                format!("tone={}", adapter().display()),
            ],
        );
        let spec = WorkerSpec::parse(&format!(
            "{},events=tcp://127.0.0.1:{events},replay=tcp://127.0.0.1:{replay}",
            proc.url
        ))
        .unwrap();
        Self {
            proc,
            spec,
            ports: (port, events, replay),
        }
    }
}

/// A random LoRA adapter for SmolLM2-135M (30 layers, width 576, 3 KV heads of 64, FFN 1536)
/// on the attention projections, written once per test process.
fn adapter() -> std::path::PathBuf {
    use pagoda_testkit::lora_adapter::{RandomLora, gguf_adapter, projection_shapes};
    let path = std::env::temp_dir().join(format!("pagoda-router-lora-{}.gguf", std::process::id()));
    if !path.is_file() {
        let r = RandomLora::new(8, &["attn_q", "attn_k", "attn_v", "attn_output"], 7);
        let t = r.tensors(30, &projection_shapes(576, 576, 192, 1536));
        gguf_adapter("llama", r.alpha, &t, pagoda_gguf::GgmlType::F16)
            .write_to(&path)
            .unwrap();
    }
    path
}

/// An in-process router over `replicas`; its base URL.
async fn router(policy: PolicyKind, replicas: &[&Replica]) -> String {
    let tokenizer = match policy {
        PolicyKind::CacheAware => Some(Arc::new(PromptTokenizer::open(&model(), None).unwrap())),
        _ => None,
    };
    let config = RouterConfig {
        workers: replicas.iter().map(|r| r.spec.clone()).collect(),
        dns: None,
        policy,
        tokenizer,
        hash_seed: "0".into(),
        tenant_salts: None,
        router_key: None,
        tuning: Default::default(),
        poll_interval: Duration::from_millis(200),
        connect_timeout: Duration::from_secs(2),
        max_request_bytes: 8 << 20,
        prefill: Vec::new(),
        pd_threshold: 0,
        pd_prefill_timeout: Duration::from_secs(60),
    };
    common::serve_router(config).await
}

async fn post(c: &reqwest::Client, url: &str, path: &str, body: &Value) -> (String, Value) {
    let r = c
        .post(format!("{url}{path}"))
        .json(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{path} via {url}");
    let worker = r
        .headers()
        .get(WORKER_HEADER)
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (worker, r.json().await.unwrap())
}

/// The SSE body with the per-request `id` and `created` values blanked.
fn without_ids(body: &str) -> String {
    blank(&blank(body, "\"id\":"), "\"created\":")
}

fn blank(s: &str, key: &str) -> String {
    let (mut out, mut rest) = (String::new(), s);
    while let Some(i) = rest.find(key) {
        out.push_str(&rest[..i + key.len()]);
        let v = &rest[i + key.len()..];
        rest = &v[v.find([',', '}']).unwrap_or(v.len())..];
    }
    out + rest
}

fn long_system(topic: &str) -> String {
    (0..40)
        .map(|i| format!("Rule {i} about {topic}: answer briefly and stay on {topic}."))
        .collect::<Vec<_>>()
        .join(" ")
}

fn chat(system: &str, user: &str) -> Value {
    json!({"model": MODEL_NAME, "max_tokens": 1, "temperature": 0,
           "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]})
}

/// The `/metrics` text of a router or replica.
async fn metrics(c: &reqwest::Client, base: &str) -> String {
    let r = c.get(format!("{base}/metrics")).send().await.unwrap();
    r.text().await.unwrap()
}

/// The value of the router's series `name{worker="url"}` (0 if absent).
async fn router_gauge(c: &reqwest::Client, router: &str, name: &str, url: &str) -> u64 {
    let m = metrics(c, router).await;
    let key = format!("pagoda_router:{name}{{worker=\"{url}\"}} ");
    m.lines()
        .find_map(|l| l.strip_prefix(&key))
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0)
}

/// Waits until `ok` holds for the router's `name` gauge of `url`.
async fn wait_gauge(
    c: &reqwest::Client,
    router: &str,
    name: &str,
    url: &str,
    what: &str,
    ok: impl Fn(u64) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let v = router_gauge(c, router, name, url).await;
        if ok(v) {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: {name} of {url} is {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A replica's own `num_requests_running + num_requests_waiting`.
async fn replica_load(c: &reqwest::Client, url: &str) -> u64 {
    let m = metrics(c, url).await;
    ["pagoda:num_requests_running", "pagoda:num_requests_waiting"]
        .iter()
        .map(|name| {
            m.lines()
                .filter(|l| {
                    l.strip_prefix(name)
                        .is_some_and(|rest| rest.starts_with(['{', ' ']))
                })
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum::<f64>() as u64
        })
        .sum()
}

fn cached_tokens(v: &Value) -> u64 {
    v["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_over_real_replicas() {
    let c = reqwest::Client::builder().no_proxy().build().unwrap();
    let (a, b) = (Replica::start(), Replica::start());
    a.wait_ready(&c).await;
    b.wait_ready(&c).await;
    let started = Instant::now();

    // Round robin alternates.
    let rr = router(PolicyKind::RoundRobin, &[&a, &b]).await;
    let short = json!({"model": MODEL_NAME, "prompt": "Hi", "max_tokens": 1});
    let mut seen = Vec::new();
    for _ in 0..4 {
        seen.push(post(&c, &rr, "/v1/completions", &short).await.0);
    }
    assert!(seen.windows(2).all(|w| w[0] != w[1]), "{seen:?}");
    assert!(seen.contains(&a.url) && seen.contains(&b.url), "{seen:?}");

    // A greedy stream through the router is the replica's own, chunk for chunk.
    let stream = json!({"model": MODEL_NAME, "prompt": "The capital of France is",
                        "max_tokens": 24, "temperature": 0, "stream": true,
                        "stream_options": {"include_usage": true}});
    let direct = c
        .post(format!("{}/v1/completions", a.url))
        .json(&stream)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let r = c
        .post(format!("{rr}/v1/completions"))
        .json(&stream)
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    let mut chunks = r.bytes_stream();
    let (mut routed, mut pieces) = (Vec::new(), 0);
    while let Some(ch) = chunks.next().await {
        routed.extend_from_slice(&ch.unwrap());
        pieces += 1;
    }
    let routed = String::from_utf8(routed).unwrap();
    assert!(pieces > 1, "the stream came in one piece: buffered?");
    assert!(routed.ends_with("data: [DONE]\n\n"), "{routed}");
    assert_eq!(without_ids(&routed), without_ids(&direct));

    // Cache aware: each long system prompt is seeded on one replica directly; requests
    // sharing it then go to that replica and hit its cache.
    let ca = router(PolicyKind::CacheAware, &[&a, &b]).await;
    let (pa, pb) = (long_system("gardening"), long_system("astronomy"));
    post(&c, &a.url, "/v1/chat/completions", &chat(&pa, "seed")).await;
    post(&c, &b.url, "/v1/chat/completions", &chat(&pb, "seed")).await;
    // The router learns of the blocks through the replicas' KV events.
    for url in [&a.url, &b.url] {
        wait_gauge(&c, &ca, "indexed_blocks", url, "KV events", |v| v >= 10).await;
    }
    for (i, (prompt, holder)) in [(&pb, &b.url), (&pa, &a.url), (&pb, &b.url), (&pa, &a.url)]
        .into_iter()
        .enumerate()
    {
        let (worker, v) = post(
            &c,
            &ca,
            "/v1/chat/completions",
            &chat(prompt, &format!("q{i}")),
        )
        .await;
        assert_eq!(&worker, holder, "request {i}");
        let prompt_tokens = v["usage"]["prompt_tokens"].as_u64().unwrap();
        assert!(
            cached_tokens(&v) >= prompt_tokens - 32,
            "request {i}: {} of {prompt_tokens} cached",
            cached_tokens(&v)
        );
    }

    // A LoRA adapter's blocks are hashed with its digest: each prefix seeded under the adapter
    // on one replica draws the adapter's requests there.
    let lora = |system: &str, user: &str| {
        let mut v = chat(system, user);
        v["model"] = json!("tone");
        v
    };
    let (la, lb) = (long_system("pottery"), long_system("sailing"));
    let before_a = router_gauge(&c, &ca, "indexed_blocks", &a.url).await;
    let before_b = router_gauge(&c, &ca, "indexed_blocks", &b.url).await;
    post(&c, &a.url, "/v1/chat/completions", &lora(&la, "seed")).await;
    post(&c, &b.url, "/v1/chat/completions", &lora(&lb, "seed")).await;
    wait_gauge(&c, &ca, "indexed_blocks", &a.url, "KV events", |v| {
        v >= before_a + 10
    })
    .await;
    wait_gauge(&c, &ca, "indexed_blocks", &b.url, "KV events", |v| {
        v >= before_b + 10
    })
    .await;
    for (prompt, holder) in [(&lb, &b.url), (&la, &a.url)] {
        let (worker, v) = post(&c, &ca, "/v1/chat/completions", &lora(prompt, "q")).await;
        assert_eq!(&worker, holder, "a LoRA request went elsewhere: {v}");
        assert!(cached_tokens(&v) > 0, "{v}");
    }

    // Under skew the load wins over the cache: with 12 streams running on `a` (sent to it
    // directly, so the router sees them only through a's metrics), a request whose prefix
    // `a` holds goes to `b`, counted as a balance override.
    let long = json!({"model": MODEL_NAME, "prompt": "Count:", "max_tokens": 1500,
                      "ignore_eos": true, "stream": true});
    let mut busy = Vec::new();
    for _ in 0..12 {
        let r = c
            .post(format!("{}/v1/completions", a.url))
            .json(&long)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        busy.push(r.bytes_stream());
    }
    for s in &mut busy {
        s.next().await.unwrap().unwrap();
    }
    // The gauges are the engine's last published stats: wait for them to show the streams.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let load = replica_load(&c, &a.url).await;
        if load >= 12 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a's load is {load} with 12 streams"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Three of the router's metric polls (every 200 ms) later, it has seen that load.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let (worker, _) = post(&c, &ca, "/v1/chat/completions", &chat(&pa, "skewed")).await;
    assert_eq!(
        worker, b.url,
        "a skewed load still went to the prefix holder"
    );
    let m = metrics(&c, &ca).await;
    assert!(
        m.lines()
            .any(|l| l.starts_with("pagoda_router:balance_overrides_total ") && !l.ends_with(" 0")),
        "{m}"
    );
    drop(busy);
    // Aborted streams leave `a` (the checks below want it idle).
    let deadline = Instant::now() + Duration::from_secs(20);
    while replica_load(&c, &a.url).await > 0 {
        assert!(Instant::now() < deadline, "a's aborted streams never ended");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A draining replica (SIGTERM with a stream still open) gets no new requests.
    let held = c
        .post(format!("{}/v1/completions", b.url))
        .json(&long)
        .send()
        .await
        .unwrap();
    let mut held = held.bytes_stream();
    held.next().await.unwrap().unwrap();
    b.signal("-TERM");
    // The signal is handled asynchronously: wait until the replica itself says it drains
    // (the router may not know yet, so its first request can meet the 503 and be retried).
    let deadline = Instant::now() + Duration::from_secs(10);
    while c
        .get(format!("{}/ready", b.url))
        .send()
        .await
        .is_ok_and(|r| r.status() == 200)
    {
        assert!(
            Instant::now() < deadline,
            "the replica never started draining"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for i in 0..4 {
        let (worker, _) = post(&c, &rr, "/v1/completions", &short).await;
        assert_eq!(worker, a.url, "request {i} went to the draining replica");
    }
    drop(held);

    // A replica killed mid-stream: the client gets an SSE error event, then the end.
    let r = c
        .post(format!("{rr}/v1/completions"))
        .json(&long)
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()[WORKER_HEADER].to_str().unwrap(), a.url);
    let mut body = r.bytes_stream();
    let mut text = String::from_utf8(body.next().await.unwrap().unwrap().to_vec()).unwrap();
    a.signal("-KILL");
    let rest = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(ch) = body.next().await {
            text.push_str(&String::from_utf8_lossy(&ch.unwrap()));
        }
    })
    .await;
    assert!(rest.is_ok(), "the stream hung after its replica died");
    let last = text.trim_end().rsplit("\n\n").next().unwrap();
    assert!(last.starts_with("data: {\"error\":"), "{last}");
    assert!(!text.contains("[DONE]"));

    // The dead replica comes back on its ports as a new process with an empty cache: the
    // router forgets what the old one held, then rebuilds the index from the new one's events.
    let (port, events, replay) = a.ports;
    let url = a.url.clone();
    drop(a);
    let a = Replica::start_on(port, events, replay);
    a.wait_ready(&c).await;
    // The router takes it back only once a health poll has seen it ready (its index is
    // cleared then); the replica's own /ready can answer first.
    let ready = format!("pagoda_router:worker_health{{worker=\"{url}\",health=\"ready\"}} 1");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !metrics(&c, &ca).await.lines().any(|l| l == ready) {
        assert!(
            Instant::now() < deadline,
            "the router never saw {url} ready again"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    wait_gauge(&c, &ca, "indexed_blocks", &url, "after the restart", |v| {
        v == 0
    })
    .await;
    let (worker, v) = post(&c, &ca, "/v1/chat/completions", &chat(&pa, "again")).await;
    assert_eq!(worker, url);
    assert!(cached_tokens(&v) < 32, "a fresh replica had it cached: {v}");
    wait_gauge(
        &c,
        &ca,
        "indexed_blocks",
        &url,
        "rebuilt from events",
        |v| v >= 10,
    )
    .await;
    eprintln!(
        "router checks took {:?} after the replicas loaded",
        started.elapsed()
    );
}
