//! Operations over HTTP, one SmolLM2 server for the binary: `X-Request-Id` on every response,
//! CORS preflight for `--allowed-origins`, and OTLP/HTTP trace export (captured by a collector
//! this test runs) with the caller's W3C `traceparent` honoured.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use common::{MODEL, TestServer, config, small_setup};
use serde_json::{Value, json};

const ORIGIN: &str = "http://app.example";

struct Setup {
    server: TestServer,
    exports: Mutex<Receiver<Value>>,
}

/// A collector: answers 200 to every POST and passes its JSON body on.
fn collector() -> (String, Receiver<Value>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1/traces", listener.local_addr().unwrap());
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let mut conn = conn.unwrap();
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            let (mut line, mut len, mut request_line) = (String::new(), 0, String::new());
            reader.read_line(&mut request_line).unwrap();
            loop {
                line.clear();
                reader.read_line(&mut line).unwrap();
                if line == "\r\n" {
                    break;
                }
                let lower = line.to_ascii_lowercase();
                if let Some(v) = lower.strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap();
                }
            }
            let mut body = vec![0; len];
            reader.read_exact(&mut body).unwrap();
            conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                .unwrap();
            assert!(
                request_line.starts_with("POST /v1/traces "),
                "{request_line}"
            );
            let _ = tx.send(serde_json::from_slice(&body).unwrap());
        }
    });
    (url, rx)
}

fn setup() -> &'static Setup {
    static S: OnceLock<Setup> = OnceLock::new();
    S.get_or_init(|| {
        let (url, rx) = collector();
        let server = TestServer::start(
            small_setup(),
            pagoda_server::ServerConfig {
                allowed_origins: vec![ORIGIN.into()],
                otlp_traces_endpoint: Some(url),
                ..config()
            },
        );
        Setup {
            server,
            exports: Mutex::new(rx),
        }
    })
}

fn chat_body() -> Value {
    json!({"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4})
}

#[tokio::test]
async fn request_ids_are_echoed_or_made_on_every_response() {
    let s = &setup().server;
    let c = reqwest::Client::new();
    let res = c
        .post(s.url("/v1/chat/completions"))
        .header("x-request-id", "my-id-42")
        .json(&chat_body())
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["x-request-id"], "my-id-42");
    // Made when absent or unusable, on errors too.
    for (path, bad) in [
        ("/health", None),
        ("/nope", Some("has space")),
        ("/v1/models", None),
    ] {
        let mut req = c.get(s.url(path));
        if let Some(b) = bad {
            req = req.header("x-request-id", b);
        }
        let res = req.send().await.unwrap();
        let id = res.headers()["x-request-id"].to_str().unwrap().to_owned();
        assert!(
            id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()),
            "{path}: {id}"
        );
    }
}

#[tokio::test]
async fn cors_preflight_is_answered_for_allowed_origins_only() {
    let s = &setup().server;
    let c = reqwest::Client::new();
    let preflight = |origin: &'static str| {
        c.request(reqwest::Method::OPTIONS, s.url("/v1/chat/completions"))
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header(
                "access-control-request-headers",
                "authorization,content-type",
            )
            .send()
    };
    let res = preflight(ORIGIN).await.unwrap();
    assert!(res.status().is_success(), "{}", res.status());
    let h = res.headers();
    assert_eq!(h["access-control-allow-origin"], ORIGIN);
    assert!(
        h["access-control-allow-methods"]
            .to_str()
            .unwrap()
            .contains("POST")
    );
    assert!(h.contains_key("access-control-allow-headers"));
    assert!(h.contains_key("x-request-id"));
    let other = preflight("http://evil.example").await.unwrap();
    assert!(!other.headers().contains_key("access-control-allow-origin"));
    // A real request from the allowed origin may read the answer and its request id.
    let res = c
        .post(s.url("/v1/chat/completions"))
        .header("origin", ORIGIN)
        .json(&chat_body())
        .send()
        .await
        .unwrap();
    assert_eq!(res.headers()["access-control-allow-origin"], ORIGIN);
    let exposed = res.headers()["access-control-expose-headers"]
        .to_str()
        .unwrap();
    assert!(exposed.contains("x-request-id"), "{exposed}");
}

/// Waits for an export holding spans of `trace_id`.
fn spans_of(trace_id: &str) -> Vec<Value> {
    let rx = setup().exports.lock().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut found = Vec::new();
    while found.len() < 4 {
        let left = deadline.saturating_duration_since(Instant::now());
        let export = rx
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("no spans of trace {trace_id}; got {found:?}"));
        let spans = &export["resourceSpans"][0]["scopeSpans"][0]["spans"];
        found.extend(
            spans
                .as_array()
                .unwrap()
                .iter()
                .filter(|s| s["traceId"] == trace_id)
                .cloned(),
        );
    }
    found
}

fn nanos(span: &Value, field: &str) -> u128 {
    span[field].as_str().unwrap().parse().unwrap()
}

#[tokio::test]
async fn traces_join_the_callers_trace_with_queue_prefill_and_decode() {
    let s = &setup().server;
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let parent = "00f067aa0ba902b7";
    let res = reqwest::Client::new()
        .post(s.url("/v1/chat/completions"))
        .header("traceparent", format!("00-{trace_id}-{parent}-01"))
        .header("x-request-id", "traced-1")
        .json(
            &json!({"model": MODEL, "messages": [{"role": "user", "content": "Hi"}],
                      "max_tokens": 6, "stream": true}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    res.text().await.unwrap();
    let spans = spans_of(trace_id);
    let root = spans
        .iter()
        .find(|s| s["parentSpanId"] == parent)
        .unwrap_or_else(|| panic!("no root under the caller's span: {spans:?}"));
    assert_eq!(root["name"], "POST /v1/chat/completions");
    assert_eq!(root["kind"], 2);
    let attr = |key: &str| {
        root["attributes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["key"] == key)
            .map(|a| a["value"].clone())
    };
    assert_eq!(
        attr("pagoda.request_id").unwrap()["stringValue"],
        "traced-1"
    );
    let output: u64 = attr("gen_ai.usage.output_tokens").unwrap()["intValue"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=6).contains(&output));
    let phase = |name: &str| {
        spans
            .iter()
            .find(|s| s["name"] == name)
            .unwrap_or_else(|| panic!("no {name} span: {spans:?}"))
    };
    let (queue, prefill, decode) = (phase("queue"), phase("prefill"), phase("decode"));
    for p in [queue, prefill, decode] {
        assert_eq!(p["parentSpanId"], root["spanId"]);
        assert!(nanos(p, "startTimeUnixNano") <= nanos(p, "endTimeUnixNano"));
        assert!(nanos(p, "startTimeUnixNano") >= nanos(root, "startTimeUnixNano"));
        assert!(nanos(p, "endTimeUnixNano") <= nanos(root, "endTimeUnixNano"));
    }
    assert_eq!(
        nanos(queue, "endTimeUnixNano"),
        nanos(prefill, "startTimeUnixNano")
    );
    assert_eq!(
        nanos(prefill, "endTimeUnixNano"),
        nanos(decode, "startTimeUnixNano")
    );
}
