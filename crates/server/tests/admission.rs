//! Admission against the waiting-queue limit, as a hostile client finds it: a request that could
//! never fit is a 400 that says so (not a 429 "retry later"), a 429 names the real queue length,
//! and a refused request leaves no trace: none of its prompts runs and it holds no queue slot.
#![allow(clippy::unwrap_used)]

use crate::common;

use common::{MODEL, TestServer, client, config, error_of, metric, post, small_setup, wait_metric};
use futures_util::StreamExt;
use serde_json::json;

/// Waits until the engine's gauge `name` reads `want`.
#[tokio::test]
async fn requests_over_the_queue_limit_are_400_and_a_full_queue_is_429_with_its_length() {
    let mut setup = small_setup();
    setup.scheduler.max_num_seqs = 1;
    setup.scheduler.max_waiting_requests = 2;
    let s = TestServer::start(setup, config());
    let c = client();
    let url = s.url("/v1/completions");

    // Three prompts, or n = 3, can never wait at once under a limit of 2: 400, not 429.
    for body in [
        json!({"model": MODEL, "prompt": ["a", "b", "c"], "max_tokens": 1}),
        json!({"model": MODEL, "prompt": "a", "n": 3, "max_tokens": 1}),
        json!({"model": MODEL, "prompt": ["a", "b"], "n": 2, "max_tokens": 1, "stream": true}),
    ] {
        let (st, v) = post(&c, &url, &body).await;
        assert_eq!(st, 400, "{v}");
        let e = error_of(&v);
        let msg = e["message"].as_str().unwrap();
        assert!(msg.contains("at most 2") || msg.contains("the 2"), "{msg}");
        assert_eq!(e["param"], "n", "{v}");
    }
    // None of them holds a slot: small requests go straight through.
    let before = metric(&c, &s.base, "pagoda:prompt_tokens_total").await;
    for _ in 0..4 {
        let (st, v) = post(
            &c,
            &url,
            &json!({"model": MODEL, "prompt": ["x", "y"], "max_tokens": 1}),
        )
        .await;
        assert_eq!(st, 200, "an empty queue refused a small request: {v}");
    }
    assert!(metric(&c, &s.base, "pagoda:prompt_tokens_total").await > before);

    // A runs, B waits (one sequence of two): a request of two prompts finds the queue full.
    let long = json!({"model": MODEL, "prompt": "Tell me a story", "max_tokens": 500,
        "ignore_eos": true, "stream": true});
    let a = c.post(&url).json(&long).send().await.unwrap();
    assert_eq!(a.status(), 200);
    let mut a = a.bytes_stream();
    a.next().await.unwrap().unwrap();
    let b = {
        let (c, url, long) = (c.clone(), url.clone(), long.clone());
        tokio::spawn(async move { c.post(&url).json(&long).send().await.unwrap() })
    };
    wait_metric(&s, "pagoda:num_requests_waiting", 1.0).await;
    let prompt_tokens = metric(&c, &s.base, "pagoda:prompt_tokens_total").await;
    let (st, v) = post(
        &c,
        &url,
        &json!({"model": MODEL, "prompt": ["c", "d"], "max_tokens": 1}),
    )
    .await;
    assert_eq!(st, 429, "{v}");
    let msg = error_of(&v)["message"].as_str().unwrap().to_owned();
    assert!(msg.contains("1 sequences are waiting"), "{msg}");
    // Counted where /metrics renders refusals (it was counted into the model's own counters,
    // which are not rendered, until the SLO policy's 429 needed the same count).
    assert_eq!(rejected(&c, &s.base, "queue_full").await, 1.0);
    // None of its prompts ran (A decodes; no prompt is computed while B waits).
    assert_eq!(
        metric(&c, &s.base, "pagoda:prompt_tokens_total").await,
        prompt_tokens
    );
    // The refused request took no slot: one prompt still fits beside B, and C's prompts never
    // ran. Its stream is admitted (200) and then dropped: read to the end, it would wait for
    // A's and B's 500 tokens each.
    let e = c
        .post(&url)
        .json(&json!({"model": MODEL, "prompt": "e", "max_tokens": 1, "stream": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(e.status(), 200);
    drop(e);
    drop(a);
    drop(b.await.unwrap());
    wait_metric(&s, "pagoda:num_requests_running", 0.0).await;
    wait_metric(&s, "pagoda:num_requests_waiting", 0.0).await;
}

/// Under `--slo ttft=..`, a request whose first token is predicted past the target is a 429 with
/// a Retry-After, counted as `reason="slo"`, and nothing of it runs (the policy's rule itself is
/// tested on a virtual clock in crates/core/tests/slo.rs).
#[tokio::test]
async fn a_request_predicted_past_the_ttft_target_is_429_with_retry_after() {
    let mut setup = small_setup();
    // No CPU computes 400 prompt tokens in a millisecond: the prediction must refuse.
    setup.slo = Some(pagoda_core::SloTargets {
        ttft: Some(std::time::Duration::from_millis(1)),
        tpot: None,
    });
    let s = TestServer::start(setup, config());
    let c = client();
    // The start-up warm-up's prompt is counted after the step that ran it, which can come after
    // the server answers: wait for it, or it lands between the two readings.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let before = loop {
        let v = metric(&c, &s.base, "pagoda:prompt_tokens_total").await;
        if v > 0.0 || std::time::Instant::now() > deadline {
            break v;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert!(before > 0.0, "the warm-up's prompt was never counted");
    let body = json!({"model": MODEL, "prompt": "word ".repeat(400), "max_tokens": 4});
    let r = c
        .post(s.url("/v1/completions"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
    let retry: u64 = r.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(retry >= 1);
    let v: serde_json::Value = r.json().await.unwrap();
    let msg = error_of(&v)["message"].as_str().unwrap();
    assert!(msg.contains("past its 1 ms target"), "{msg}");
    assert_eq!(rejected(&c, &s.base, "slo").await, 1.0);
    assert_eq!(
        metric(&c, &s.base, "pagoda:prompt_tokens_total").await,
        before
    );
}

/// `pagoda:request_rejected_total` for `reason`.
async fn rejected(c: &reqwest::Client, base: &str, reason: &str) -> f64 {
    let text = common::metrics_text(c, base).await;
    let label = format!("reason=\"{reason}\"");
    text.lines()
        .find(|l| l.starts_with("pagoda:request_rejected_total") && l.contains(&label))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {label} in\n{text}"))
}
