//! Speculative decoding over HTTP on a tiny random model with n-gram proposals: a request's
//! `speculative` field narrows the server's (off, or a lower K; the greedy text never
//! changes) and is refused with a 400 naming the field where it cannot apply, a stop string
//! met inside a run of accepted proposals cuts the text where plain decoding does, and
//! `pagoda:inter_token_latency_seconds` counts one gap per generated token even when a step
//! emits an accepted run of several.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::{MODEL, TestServer, client, error_of, metric, post};
use pagoda_core::{NumSpecTokens, SpecConfig, SpecMethod};
use pagoda_model::EngineSetup;
use pagoda_testkit::tiny_model::TinyModel;
use serde_json::{Value, json};

const K: usize = 3;

fn server() -> &'static TestServer {
    static S: OnceLock<TestServer> = OnceLock::new();
    S.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("pagoda-spec-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let model: PathBuf = dir.join("tiny.gguf");
        std::fs::write(&model, TinyModel::llama().to_bytes()).unwrap();
        let setup = EngineSetup {
            kv_cache_memory: Some(16 << 20),
            max_model_len: Some(256),
            speculative: Some(SpecConfig {
                method: SpecMethod::Ngram { min_n: 1, max_n: 3 },
                num_speculative_tokens: NumSpecTokens::Fixed(K),
            }),
            ..EngineSetup::default()
        };
        TestServer::start_model(model, setup, common::config())
    })
}

/// A greedy completion of `prompt` (token ids) with `extra` fields merged in.
fn body(extra: Value) -> Value {
    let mut b = json!({
        "model": MODEL,
        "prompt": [5, 17, 29, 41, 5, 17, 29, 41, 5, 17, 29, 41],
        "max_tokens": 24,
        "temperature": 0,
        "ignore_eos": true,
    });
    if let (Some(b), Some(e)) = (b.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    b
}

const DRAFTS: &str = "pagoda:spec_decode_num_draft_tokens_total";
const ACCEPTED: &str = "pagoda:spec_decode_num_accepted_tokens_total";
const ITL: &str = "pagoda:inter_token_latency_seconds_count";

/// Waits until `name` stops moving (the engine publishes its counters after each step).
async fn settled(s: &TestServer, name: &str) -> f64 {
    let c = client();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut last = metric(&c, &s.base, name).await;
    loop {
        tokio::time::sleep(Duration::from_millis(150)).await;
        let v = metric(&c, &s.base, name).await;
        if v == last || Instant::now() > deadline {
            return v;
        }
        last = v;
    }
}

/// Held by the tests that generate: the counters one test reads would otherwise move with the
/// other's requests on the shared server.
static GENERATING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test]
async fn a_request_narrows_speculation_and_latency_counts_every_token() {
    let _alone = GENERATING.lock().await;
    let s = server();
    let c = client();
    let url = s.url("/v1/completions");
    let (before_drafts, before_accepted) = (settled(s, DRAFTS).await, settled(s, ACCEPTED).await);
    let itl = metric(&c, &s.base, ITL).await;
    let (st, plain) = post(&c, &url, &body(json!({}))).await;
    assert_eq!(st, 200, "{plain}");
    // Runs of accepted proposals came out of single steps, yet every token after the first
    // is one inter-token gap.
    assert_eq!(metric(&c, &s.base, ITL).await - itl, 23.0);
    let (drafts, accepted) = (settled(s, DRAFTS).await, settled(s, ACCEPTED).await);
    assert!(drafts > before_drafts, "nothing proposed");
    assert!(accepted > before_accepted, "nothing accepted");

    // Off: no proposals at all; a lower K: the same greedy text either way.
    let (st, off) = post(&c, &url, &body(json!({"speculative": false}))).await;
    assert_eq!(st, 200, "{off}");
    assert_eq!(
        settled(s, DRAFTS).await,
        drafts,
        "proposals with speculation off"
    );
    let one = json!({"speculative": {"method": "ngram", "num_speculative_tokens": 1}});
    let (st, narrowed) = post(&c, &url, &body(one)).await;
    assert_eq!(st, 200, "{narrowed}");
    for v in [&off, &narrowed] {
        assert_eq!(v["choices"][0]["text"], plain["choices"][0]["text"]);
    }
}

#[tokio::test]
async fn a_stop_string_inside_an_accepted_run_cuts_the_text_as_plain_decoding_does() {
    let _alone = GENERATING.lock().await;
    let s = server();
    let c = client();
    let url = s.url("/v1/completions");
    let (st, plain) = post(&c, &url, &body(json!({"speculative": false}))).await;
    assert_eq!(st, 200, "{plain}");
    let text = plain["choices"][0]["text"].as_str().unwrap().to_string();
    // A stop string from the middle of the plain text (its first occurrence decides).
    let chars: Vec<char> = text.chars().collect();
    assert!(chars.len() >= 12, "{text:?}");
    let stop: String = chars[chars.len() / 2..chars.len() / 2 + 3].iter().collect();
    let cut = &text[..text.find(&stop).unwrap()];
    for spec in [json!(false), json!(true)] {
        let (st, v) = post(
            &c,
            &url,
            &body(json!({"stop": [&stop], "speculative": spec})),
        )
        .await;
        assert_eq!(st, 200, "{v}");
        assert_eq!(v["choices"][0]["text"], cut, "speculative {spec}");
        assert_eq!(
            v["choices"][0]["finish_reason"], "stop",
            "speculative {spec}"
        );
    }
}

#[tokio::test]
async fn a_speculative_field_that_cannot_apply_is_a_400_naming_it() {
    let s = server();
    let c = client();
    let cases = [
        (
            json!({"method": "ngram", "num_speculative_tokens": K + 1}),
            "speculative.num_speculative_tokens",
        ),
        (json!({"method": "draft_model"}), "speculative.method"),
        (json!({"method": 3}), "speculative.method"),
        (
            json!({"num_speculative_tokens": "two"}),
            "speculative.num_speculative_tokens",
        ),
        (json!({"k": 2}), "speculative.k"),
        (json!("ngram"), "speculative"),
    ];
    for (spec, param) in cases {
        let (st, v) = post(
            &c,
            &s.url("/v1/completions"),
            &body(json!({"speculative": spec})),
        )
        .await;
        assert_eq!(st, 400, "{spec}: {v}");
        assert_eq!(error_of(&v)["param"], param, "{v}");
        // Chat reads the same field through the same path.
        let chat = json!({
            "model": MODEL,
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 2,
            "speculative": spec,
        });
        let (st, v) = post(&c, &s.url("/v1/chat/completions"), &chat).await;
        assert_eq!(st, 400, "chat {spec}: {v}");
        assert_eq!(error_of(&v)["param"], param, "chat: {v}");
    }
    // Messages and Responses read it too, each refusing in its own error shape.
    let bad = json!({"method": "draft_model"});
    let messages = json!({"model": MODEL, "max_tokens": 2,
        "messages": [{"role": "user", "content": "hi"}], "speculative": bad});
    let (st, v) = post(&c, &s.url("/v1/messages"), &messages).await;
    assert_eq!((st, &v["type"]), (400, &json!("error")), "{v}");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.contains("speculative.method"), "{msg}");
    let responses = json!({"model": MODEL, "max_output_tokens": 2, "input": "hi",
        "speculative": bad});
    let (st, v) = post(&c, &s.url("/v1/responses"), &responses).await;
    assert_eq!(st, 400, "{v}");
    assert_eq!(error_of(&v)["param"], "speculative.method", "{v}");
    // And accept `false` (speculation off for the request).
    for (url, mut b) in [("/v1/messages", messages), ("/v1/responses", responses)] {
        b["speculative"] = json!(false);
        let (st, v) = post(&c, &s.url(url), &b).await;
        assert_eq!(st, 200, "{url}: {v}");
    }
}
