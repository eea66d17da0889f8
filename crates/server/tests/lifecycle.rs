//! Behaviour that needs its own server: output invariance across engine settings, 401, 413,
//! 429, cache-salt isolation, dropped streams freeing their KV, and the graceful drain.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::time::{Duration, Instant};

use common::{MODEL, TestServer, client, config, error_of, metric, post, small_setup};
use futures_util::StreamExt;
use pagoda_server::ServerConfig;
use serde_json::{Value, json};

/// Several requests at once (so they batch), seeded sampling: the texts by prompt.
async fn sample_batch(s: &TestServer) -> Vec<Value> {
    let c = client();
    // A shared preamble of more than one KV block, so repeats hit the prefix cache.
    let preamble = "You are a helpful writer. Answer in one vivid sentence, without lists, headings or preamble. ";
    let prompts = [
        "The sea is",
        "My favourite food is",
        "In the year 2050,",
        "The sea is",
    ];
    let futs = prompts.iter().enumerate().map(|(i, p)| {
        let body = json!({"model": MODEL, "prompt": format!("{preamble}{p}"), "max_tokens": 12, "temperature": 0.9,
            "top_p": 0.95, "seed": 100 + i, "ignore_eos": true});
        let c = c.clone();
        let url = s.url("/v1/completions");
        async move { post(&c, &url, &body).await.1["choices"][0]["text"].clone() }
    });
    futures_util::future::join_all(futs).await
}

#[test]
fn same_seed_same_output_across_max_num_seqs_and_prefix_caching() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut outputs = Vec::new();
    for (seqs, prefix) in [(1, true), (8, true), (8, false)] {
        let mut setup = small_setup();
        setup.scheduler.max_num_seqs = seqs;
        setup.enable_prefix_caching = prefix;
        let s = TestServer::start(setup, config());
        // Twice: the second round hits the prefix cache when it is on.
        let first = rt.block_on(sample_batch(&s));
        let second = rt.block_on(sample_batch(&s));
        assert_eq!(first, second, "max_num_seqs={seqs} prefix={prefix}");
        if prefix {
            let hits = rt.block_on(metric(&client(), &s.base, "pagoda:prefix_cache_hits_total"));
            assert!(hits > 0.0, "prefix cache never hit");
        }
        outputs.push((seqs, prefix, first));
        s.stop();
        s.join().unwrap();
    }
    for w in outputs.windows(2) {
        assert_eq!(
            w[0].2,
            w[1].2,
            "{:?} vs {:?}",
            (w[0].0, w[0].1),
            (w[1].0, w[1].1)
        );
    }
}

#[tokio::test]
async fn api_key_is_required_and_checked() {
    let s = TestServer::start(
        small_setup(),
        ServerConfig {
            api_key: Some("sk-right".into()),
            ..config()
        },
    );
    let c = client();
    let body = json!({"model": MODEL, "prompt": "hi", "max_tokens": 1});
    for auth in [
        None,
        Some("Bearer sk-wrong"),
        Some("Bearer sk-righ"),
        Some("sk-right"),
    ] {
        let mut req = c.post(s.url("/v1/completions")).json(&body);
        if let Some(a) = auth {
            req = req.header("authorization", a);
        }
        let res = req.send().await.unwrap();
        assert_eq!(res.status(), 401, "{auth:?}");
        let v: Value = res.json().await.unwrap();
        assert_eq!(error_of(&v)["type"], "authentication_error");
    }
    let res = c
        .post(s.url("/v1/completions"))
        .bearer_auth("sk-right")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(c.get(s.url("/health")).send().await.unwrap().status(), 200);
    assert_eq!(
        c.get(s.url("/v1/models")).send().await.unwrap().status(),
        401
    );
    assert_eq!(
        metric(
            &c,
            &s.base,
            "pagoda:request_rejected_total{model_name=\"smol\",reason=\"unauthorized\"}"
        )
        .await,
        5.0
    );
}

#[tokio::test]
async fn body_over_the_limit_is_413() {
    let s = TestServer::start(
        small_setup(),
        ServerConfig {
            max_request_bytes: 2048,
            ..config()
        },
    );
    let c = client();
    let body = json!({"model": MODEL, "prompt": "x".repeat(4096), "max_tokens": 1});
    let (st, v) = post(&c, &s.url("/v1/completions"), &body).await;
    assert_eq!(st, 413, "{v}");
    assert!(error_of(&v)["message"].as_str().unwrap().contains("2048"));
    let (st, _) = post(
        &c,
        &s.url("/v1/completions"),
        &json!({"model": MODEL, "prompt": "ok", "max_tokens": 1}),
    )
    .await;
    assert_eq!(st, 200);
}

/// Opens a stream and reads until its first content chunk; returns the live response.
async fn open_stream(c: &reqwest::Client, url: &str, body: &Value) -> reqwest::Response {
    let res = c.post(url).json(body).send().await.unwrap();
    assert_eq!(res.status(), 200);
    res
}

#[tokio::test]
async fn full_waiting_queue_is_429() {
    let mut setup = small_setup();
    setup.scheduler.max_num_seqs = 1;
    setup.scheduler.max_waiting_requests = 1;
    let s = TestServer::start(setup, config());
    let c = client();
    let url = s.url("/v1/completions");
    let long = json!({"model": MODEL, "prompt": "Tell me a story", "max_tokens": 500, "ignore_eos": true, "stream": true});
    // A runs (wait for its first bytes), B waits in the queue, C finds the queue full.
    let mut a = open_stream(&c, &url, &long).await.bytes_stream();
    a.next().await.unwrap().unwrap();
    let b = {
        let (c, url, long) = (c.clone(), url.clone(), long.clone());
        tokio::spawn(async move { open_stream(&c, &url, &long).await })
    };
    // B is admitted to the queue once its request reached the handler; poll the gauge.
    let deadline = Instant::now() + Duration::from_secs(20);
    while metric(&client(), &s.base, "pagoda:num_requests_waiting").await < 1.0 {
        assert!(Instant::now() < deadline, "B never queued");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (st, v) = post(
        &c,
        &url,
        &json!({"model": MODEL, "prompt": "C", "max_tokens": 1}),
    )
    .await;
    assert_eq!(st, 429, "{v}");
    assert_eq!(error_of(&v)["type"], "rate_limit_error");
    drop(a);
    drop(b.await.unwrap());
}

#[tokio::test]
async fn dropped_streams_free_their_kv_and_the_server_still_answers() {
    let s = TestServer::start(small_setup(), config());
    let c = client();
    let url = s.url("/v1/completions");
    // 100 streams, each dropped after its first chunk, in waves of 25 (200 proved no more).
    for wave in 0..4 {
        let futs = (0..25).map(|i| {
            let c = c.clone();
            let url = url.clone();
            let body = json!({"model": MODEL, "prompt": format!("Story {wave}-{i}: once upon a time"),
                "max_tokens": 400, "ignore_eos": true, "stream": true});
            async move {
                let mut events = open_stream(&c, &url, &body).await.bytes_stream();
                // The first chunk proves generation started; then the client goes away.
                events.next().await.unwrap().unwrap();
            }
        });
        futures_util::future::join_all(futs).await;
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let usage = metric(&c, &s.base, "pagoda:kv_cache_usage_perc").await;
        let running = metric(&c, &s.base, "pagoda:num_requests_running").await;
        if usage == 0.0 && running == 0.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "KV usage stuck at {usage} with {running} running"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (st, v) = post(
        &c,
        &url,
        &json!({"model": MODEL, "prompt": "Still alive?", "max_tokens": 3, "ignore_eos": true}),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["usage"]["completion_tokens"], 3);
    let aborted = metric(
        &c,
        &s.base,
        "pagoda:request_success_total{model_name=\"smol\",finished_reason=\"abort\"}",
    )
    .await;
    assert_eq!(aborted, 100.0);
}

#[tokio::test]
async fn cache_salt_isolates_prefix_cache_entries() {
    let s = TestServer::start(small_setup(), config());
    let c = client();
    let url = s.url("/v1/completions");
    let prompt = "Shared system prompt that is long enough to fill several KV blocks of sixteen tokens each, \
        so that a second request with the same text would normally hit the prefix cache.";
    let body =
        |salt: &str| json!({"model": MODEL, "prompt": prompt, "max_tokens": 1, "cache_salt": salt});
    let (_, a) = post(&c, &url, &body("tenant-a")).await;
    assert_eq!(a["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    let (_, a2) = post(&c, &url, &body("tenant-a")).await;
    assert!(
        a2["usage"]["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap()
            > 0,
        "{a2}"
    );
    let (_, b) = post(&c, &url, &body("tenant-b")).await;
    assert_eq!(
        b["usage"]["prompt_tokens_details"]["cached_tokens"], 0,
        "{b}"
    );
}

#[tokio::test]
async fn graceful_shutdown_drains_in_flight_and_refuses_new_work() {
    let s = TestServer::start(small_setup(), config());
    let c = client();
    let url = s.url("/v1/completions");
    let body = json!({"model": MODEL, "prompt": "Write a long poem", "max_tokens": 40, "ignore_eos": true, "stream": true});
    let mut events = open_stream(&c, &url, &body).await.bytes_stream();
    events.next().await.unwrap().unwrap();
    s.stop();
    // Draining: /ready and new generation requests answer 503 while the stream goes on.
    let deadline = Instant::now() + Duration::from_secs(10);
    while c.get(s.url("/ready")).send().await.unwrap().status() != 503 {
        assert!(Instant::now() < deadline, "/ready never went to 503");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (st, v) = post(
        &c,
        &url,
        &json!({"model": MODEL, "prompt": "new", "max_tokens": 1}),
    )
    .await;
    assert_eq!(st, 503, "{v}");
    error_of(&v);
    let mut rest = Vec::new();
    while let Some(chunk) = events.next().await {
        rest.extend_from_slice(&chunk.unwrap());
    }
    let rest = String::from_utf8(rest).unwrap();
    assert!(rest.ends_with("data: [DONE]\n\n"), "{rest}");
    assert!(rest.contains("\"finish_reason\":\"length\""), "{rest}");
    drop(events);
    s.join().unwrap();
}
