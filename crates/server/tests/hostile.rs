//! What a hostile (or just broken) client finds: a wrong method or path answers the OpenAI error
//! body, never an empty one; a connection that dribbles its headers or idles between requests is
//! closed after the configured timeouts, a body trickled past its deadline is a 408, while slow
//! bodies within it and slow streams are left alone; a grammar too large for the parser is a 400
//! naming the limit before anything streams.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::{MODEL, TestServer, chunks, error_of, metrics_text, post};
use futures_util::StreamExt;
use pagoda_server::ServerConfig;
use serde_json::{Value, json};

/// Short enough that the timeout tests are quick, long enough for a noisy machine to send a
/// request's headers in one go.
const TIMEOUT: Duration = Duration::from_millis(300);
/// The whole body's deadline: well past `a_slow_body_is_not_a_slow_head`'s pause.
const BODY_TIMEOUT: Duration = Duration::from_secs(3);
/// The longest any close may take: many times `TIMEOUT`, so only a missing close fails.
const BOUND: Duration = Duration::from_secs(10);

fn server() -> &'static TestServer {
    static S: OnceLock<TestServer> = OnceLock::new();
    S.get_or_init(|| {
        TestServer::start(
            common::small_setup(),
            ServerConfig {
                request_header_timeout: TIMEOUT,
                keep_alive_timeout: TIMEOUT,
                request_body_timeout: BODY_TIMEOUT,
                ..common::config()
            },
        )
    })
}

/// A model-less server behind an API key: routing and auth need no model.
fn keyed() -> &'static TestServer {
    static S: OnceLock<TestServer> = OnceLock::new();
    S.get_or_init(|| {
        TestServer::start_unloaded(ServerConfig {
            api_key: Some("sk-right".into()),
            ..common::config()
        })
    })
}

/// A client that never reuses a connection: the server closes idle ones after `TIMEOUT`, and a
/// pooled connection closed just as a request goes out would fail that request.
fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap()
}

// ---- 405 and 404 -------------------------------------------------------------------------

/// Sends `method path` and checks the answer is `status` with the OpenAI error body.
async fn expect_json_error(
    c: &reqwest::Client,
    s: &TestServer,
    method: reqwest::Method,
    path: &str,
    status: u16,
) -> reqwest::header::HeaderMap {
    let res = c.request(method.clone(), s.url(path)).send().await.unwrap();
    assert_eq!(res.status(), status, "{method} {path}");
    let headers = res.headers().clone();
    assert_eq!(
        headers["content-type"], "application/json",
        "{method} {path}"
    );
    let text = res.text().await.unwrap();
    let v: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{method} {path}: not JSON ({e}): {text:?}"));
    error_of(&v);
    headers
}

#[tokio::test]
async fn wrong_method_and_unknown_path_answer_the_openai_error_body() {
    let s = server();
    let c = client();
    use reqwest::Method;
    for (method, path, allow) in [
        (Method::GET, "/v1/chat/completions", "POST"),
        (Method::GET, "/v1/completions", "POST"),
        (Method::DELETE, "/v1/models", "GET"),
        (Method::PUT, "/tokenize", "POST"),
        (Method::POST, "/health", "GET"),
        (Method::POST, "/metrics", "GET"),
    ] {
        let headers = expect_json_error(&c, s, method.clone(), path, 405).await;
        let allowed = headers["allow"].to_str().unwrap();
        assert!(allowed.contains(allow), "{method} {path}: Allow {allowed}");
    }
    expect_json_error(&c, s, Method::GET, "/v1/nothing-here", 404).await;
    expect_json_error(&c, s, Method::DELETE, "/v2/chat/completions", 404).await;
}

/// Behind the API key the key is checked first, as before: a wrong method without the key is a
/// 401, with it a 405; both JSON. Unknown paths and the open routes answer without a key.
#[tokio::test]
async fn wrong_method_behind_the_api_key_is_json_too() {
    let s = keyed();
    let c = client();
    use reqwest::Method;
    for (method, path) in [
        (Method::GET, "/v1/chat/completions"),
        (Method::DELETE, "/v1/models"),
    ] {
        expect_json_error(&c, s, method.clone(), path, 401).await;
        let res = c
            .request(method.clone(), s.url(path))
            .bearer_auth("sk-right")
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 405, "{method} {path}");
        assert!(res.headers().contains_key("allow"), "{method} {path}");
        error_of(&res.json::<Value>().await.unwrap());
    }
    expect_json_error(&c, s, Method::POST, "/health", 405).await;
    expect_json_error(&c, s, Method::GET, "/v1/nothing-here", 404).await;
}

// ---- slow and idle connections -----------------------------------------------------------

fn connect(s: &TestServer) -> TcpStream {
    let tcp = TcpStream::connect(s.addr()).unwrap();
    tcp.set_read_timeout(Some(BOUND)).unwrap();
    tcp
}

/// Waits for the server to close `tcp`; returns how long it took and whatever it sent first.
fn wait_closed(tcp: &mut TcpStream) -> (Duration, Vec<u8>) {
    let started = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tcp.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => break,
            Err(e) => panic!(
                "the server did not close the connection within {BOUND:?} ({e}); sent {:?}",
                String::from_utf8_lossy(&got)
            ),
        }
    }
    (started.elapsed(), got)
}

/// Reads one response with a `content-length` body: (status line, body).
fn read_response(tcp: &mut TcpStream) -> (String, String) {
    let mut data = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&data).into_owned();
        if let Some(end) = text.find("\r\n\r\n") {
            let head = &text[..end];
            let len: usize = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse().unwrap())
                })
                .unwrap_or_else(|| panic!("no content-length in {head:?}"));
            if data.len() >= end + 4 + len {
                let status = head.lines().next().unwrap().to_owned();
                return (status, text[end + 4..end + 4 + len].to_owned());
            }
        }
        let n = tcp.read(&mut buf).unwrap();
        assert!(n > 0, "connection closed mid-response: {text:?}");
        data.extend_from_slice(&buf[..n]);
    }
}

#[test]
fn a_request_head_that_never_ends_is_closed_unanswered() {
    let s = server();
    let mut tcp = connect(s);
    tcp.write_all(b"POST /v1/completions HTTP/1.1\r\nHost: pagoda\r\nContent-Type: applic")
        .unwrap();
    let (took, got) = wait_closed(&mut tcp);
    assert!(
        got.is_empty(),
        "answered: {:?}",
        String::from_utf8_lossy(&got)
    );
    assert!(
        took >= TIMEOUT / 2,
        "closed after {took:?}, before the timeout"
    );
}

/// Slowloris: one header byte at a time, each well inside the timeout, never finishing. The
/// header timeout counts from the connection's start, not from the last byte.
#[test]
fn a_head_dribbled_byte_by_byte_is_closed() {
    let s = server();
    let mut tcp = connect(s);
    tcp.set_read_timeout(Some(TIMEOUT / 3)).unwrap();
    let started = Instant::now();
    let head = b"GET /health HTTP/1.1\r\nHost: pagoda\r\nX-Padding: ".iter();
    let mut bytes = head.chain(std::iter::repeat(&b'a'));
    let closed = loop {
        assert!(started.elapsed() < BOUND, "still open after {BOUND:?}");
        if tcp.write_all(&[*bytes.next().unwrap()]).is_err() {
            break true;
        }
        let mut buf = [0u8; 64];
        match tcp.read(&mut buf) {
            Ok(0) => break true,
            Ok(n) => panic!("answered: {:?}", String::from_utf8_lossy(&buf[..n])),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => break true,
        }
    };
    assert!(closed);
}

#[test]
fn an_idle_keep_alive_connection_is_closed_after_its_requests() {
    let s = server();
    let mut tcp = connect(s);
    // Two requests on one connection: keep-alive still works.
    for _ in 0..2 {
        tcp.write_all(b"GET /health HTTP/1.1\r\nHost: pagoda\r\n\r\n")
            .unwrap();
        let (status, _) = read_response(&mut tcp);
        assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    }
    let (took, got) = wait_closed(&mut tcp);
    assert!(got.is_empty(), "sent {:?}", String::from_utf8_lossy(&got));
    assert!(
        took >= TIMEOUT / 2,
        "closed after {took:?}, before the timeout"
    );
}

/// The timeouts stop at the end of the head: a body that takes longer than both is still read
/// and answered.
#[test]
fn a_slow_body_is_not_a_slow_head() {
    let s = server();
    let mut tcp = connect(s);
    let body = br#"{"prompt": "a b c"}"#;
    write!(
        tcp,
        "POST /tokenize HTTP/1.1\r\nHost: pagoda\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n",
        body.len()
    )
    .unwrap();
    std::thread::sleep(TIMEOUT * 3);
    tcp.write_all(body).unwrap();
    let (status, answer) = read_response(&mut tcp);
    assert!(status.starts_with("HTTP/1.1 200"), "{status}: {answer}");
    let v: Value = serde_json::from_str(&answer).unwrap();
    assert!(v["count"].as_u64().unwrap() > 0, "{v}");
}

/// A body trickled a byte at a time, each byte well inside any per-read timeout, is answered
/// 408 in the OpenAI shape once the whole body's deadline passes, and the connection closes.
#[test]
fn a_trickled_body_is_cut_at_its_deadline() {
    let s = server();
    let mut tcp = connect(s);
    let body = format!(r#"{{"prompt": "{}"}}"#, "a ".repeat(100));
    write!(
        tcp,
        "POST /tokenize HTTP/1.1\r\nHost: pagoda\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n",
        body.len()
    )
    .unwrap();
    let started = Instant::now();
    tcp.set_nonblocking(true).unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    for byte in body.as_bytes() {
        // A write may fail once the server has answered and closed: the answer is what counts.
        let _ = tcp.write_all(std::slice::from_ref(byte));
        std::thread::sleep(Duration::from_millis(100));
        match tcp.read(&mut buf) {
            Ok(n) if n > 0 => {
                answer.extend_from_slice(&buf[..n]);
                break;
            }
            _ => assert!(started.elapsed() < BOUND, "no answer after {BOUND:?}"),
        }
    }
    tcp.set_nonblocking(false).unwrap();
    let (_, rest) = wait_closed(&mut tcp);
    answer.extend_from_slice(&rest);
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(started.elapsed() >= BODY_TIMEOUT, "cut early: {text}");
    let json = &text[text.find("\r\n\r\n").unwrap() + 4..];
    let v: Value = serde_json::from_str(json).unwrap();
    assert_eq!(v["error"]["code"], "request_timeout", "{v}");
}

/// A long prompt makes the gap before the first token (prefill) longer than the timeouts on
/// most machines; nothing may cut the stream, and ordinary requests pass.
#[tokio::test]
async fn slow_streams_and_ordinary_requests_are_not_cut() {
    let s = server();
    let c = client();
    let body = json!({"model": MODEL, "prompt": "tell me more about it. ".repeat(60),
                      "max_tokens": 32, "ignore_eos": true, "stream": true});
    let res = c
        .post(s.url("/v1/completions"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let mut parser = pagoda_protocol::SseParser::new();
    let mut events = Vec::new();
    let mut gap = Duration::ZERO;
    let mut last = Instant::now();
    let started = last;
    let mut bytes = res.bytes_stream();
    while let Some(chunk) = bytes.next().await {
        gap = gap.max(last.elapsed());
        last = Instant::now();
        events.extend(parser.feed(&chunk.unwrap()).into_iter().map(|e| e.data));
    }
    let chunks = chunks(&events);
    let tokens: usize = chunks
        .iter()
        .filter(|c| {
            c["choices"][0]["text"]
                .as_str()
                .is_some_and(|t| !t.is_empty())
        })
        .count();
    assert!(tokens > 0, "{events:?}");
    eprintln!(
        "stream: {:?} in all, longest gap {gap:?} (timeouts {TIMEOUT:?})",
        started.elapsed()
    );
    let (status, v) = post(
        &c,
        &s.url("/v1/chat/completions"),
        &json!({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
}

/// The accept loop still speaks h2 to a client that starts with the preface (as `axum::serve`
/// did), not only HTTP/1.1.
#[tokio::test]
async fn h2_with_prior_knowledge_is_served() {
    let s = server();
    let c = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let res = c.get(s.url("/health")).send().await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.version(), reqwest::Version::HTTP_2);
}

/// A client that never finishes its headers must not hold up the graceful shutdown: the
/// connection is closed by its timeout, and `serve` returns.
#[test]
fn a_stalled_client_does_not_hold_up_shutdown() {
    let s = TestServer::start_unloaded(ServerConfig {
        request_header_timeout: TIMEOUT,
        keep_alive_timeout: TIMEOUT,
        ..common::config()
    });
    let mut stalled = connect(&s);
    stalled
        .write_all(b"POST /v1/completions HTTP/1.1\r\nHost: pagoda\r\n")
        .unwrap();
    let mut idle = connect(&s);
    idle.write_all(b"GET /health HTTP/1.1\r\nHost: pagoda\r\n\r\n")
        .unwrap();
    let (status, _) = read_response(&mut idle);
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    let started = Instant::now();
    s.stop();
    s.join().unwrap();
    assert!(
        started.elapsed() < BOUND,
        "shutdown took {:?}",
        started.elapsed()
    );
}

// ---- grammars too large for the parser -------------------------------------------------

/// `reason="invalid"` of `pagoda:request_rejected_total`.
async fn rejected_invalid(c: &reqwest::Client, s: &TestServer) -> f64 {
    let text = metrics_text(c, &s.base).await;
    text.lines()
        .find(|l| {
            l.starts_with("pagoda:request_rejected_total{") && l.contains("reason=\"invalid\"")
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no rejected counter in\n{text}"))
}

/// Each too-large constraint, on both endpoints, streamed or not: a 400 on
/// `structured_outputs` whose message names the limit, counted as rejected.
async fn expect_too_large(constraint: Value, limit: &str) {
    let s = server();
    let c = client();
    let before = rejected_invalid(&c, s).await;
    let mut sent = 0.0;
    for path in ["/v1/completions", "/v1/chat/completions"] {
        for stream in [false, true] {
            let mut body = json!({"model": MODEL, "max_tokens": 4, "stream": stream,
                                  "structured_outputs": constraint});
            if path == "/v1/completions" {
                body["prompt"] = json!("Pick one:");
            } else {
                body["messages"] = json!([{"role": "user", "content": "Pick one."}]);
            }
            // A 400 is plain JSON, streamed or not; an SSE answer would come back as a string.
            let (status, v) = post(&c, &s.url(path), &body).await;
            assert_eq!(status, 400, "{path} stream={stream}: {v}");
            let e = error_of(&v);
            assert_eq!(e["param"], "structured_outputs", "{v}");
            let msg = e["message"].as_str().unwrap();
            assert!(
                msg.contains("too large for the parser") && msg.contains(limit),
                "{path} stream={stream}: {msg}"
            );
            sent += 1.0;
        }
    }
    let after = rejected_invalid(&c, s).await;
    assert!(after - before >= sent, "rejected {before} -> {after}");
}

#[tokio::test]
async fn a_choice_list_too_large_for_the_parser_is_a_400() {
    let choices: Vec<String> = (0..2500).map(|i| format!("option {i}")).collect();
    expect_too_large(
        json!({"choice": choices}),
        "limit `max_items_in_row` = 2000",
    )
    .await;
}

#[tokio::test]
async fn a_lark_grammar_with_thousands_of_alternatives_is_a_400() {
    let alts: Vec<String> = (0..3000).map(|i| format!("\"w{i}\"")).collect();
    let grammar = format!("start: word\nword: {}\n", alts.join(" | "));
    expect_too_large(
        json!({"grammar": grammar}),
        "limit `max_items_in_row` = 2000",
    )
    .await;
}

/// A regex alternation past the lexer's build budget (~1 s to find out: one request only).
#[tokio::test]
async fn a_huge_regex_alternation_is_a_400() {
    let s = server();
    let c = client();
    let words: Vec<String> = (0..200_000).map(|i| format!("w{i}")).collect();
    let body = json!({"model": MODEL, "max_tokens": 4, "stream": true,
                      "messages": [{"role": "user", "content": "Pick one."}],
                      "structured_outputs": {"regex": format!("({})", words.join("|"))}});
    let (status, v) = post(&c, &s.url("/v1/chat/completions"), &body).await;
    assert_eq!(status, 400, "{v}");
    let msg = error_of(&v)["message"].as_str().unwrap();
    assert!(msg.contains("limit `initial_lexer_fuel`"), "{msg}");
}

/// A client cannot steer a prefill replica's connections: `kv_transfer_params` naming a
/// destination outside `--kv-transfer-peers` (here a listener the test opens) is a 400 on the
/// field, and nothing connects to the listener; with keys set, `kv_transfer_params` are taken
/// only with a `router`-scoped key in x-pagoda-router-key (403 to a client's key alone).
#[tokio::test]
async fn kv_transfer_params_cannot_point_a_prefill_replica_elsewhere() {
    let dir = std::env::temp_dir().join(format!("pagoda-kv-peers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let model = dir.join("tiny.gguf");
    std::fs::write(
        &model,
        pagoda_testkit::tiny_model::TinyModel::llama().to_bytes(),
    )
    .unwrap();
    let setup = pagoda_model::EngineSetup {
        kv_cache_memory: Some(4 << 20),
        max_model_len: Some(256),
        kv_transfer: Some(pagoda_model::KvTransferConfig {
            role: pagoda_core::kv::KvRole::Prefill,
            listen: format!("127.0.0.1:{}", pagoda_testkit::free_port()),
            timeout: Duration::from_secs(2),
            buffer_bytes: 1 << 20,
            ttl: Duration::from_secs(5),
            model_identity: String::new(),
            secret: None,
            counters: Default::default(),
        }),
        ..pagoda_model::EngineSetup::default()
    };
    // With keys set, a client's key may not steer transfers; the router's (scope `router`,
    // in x-pagoda-router-key) may.
    let keys = dir.join("keys.json");
    std::fs::write(
        &keys,
        r#"{"keys": [{"key": "sk-client", "tenant": "c"},
                     {"key": "sk-router", "tenant": "router", "scopes": ["router"]}]}"#,
    )
    .unwrap();
    let config = ServerConfig {
        // 127.0.0.1:1 refuses at once: the allowed transfer below fails fast, in the background.
        kv_transfer_peers: pagoda_server::prepare::kv_peers::KvPeers::parse(&[
            "10.9.9.9:7100",
            "127.0.0.1:1",
        ])
        .unwrap(),
        api_keys_file: Some(keys),
        ..common::config()
    };
    let server = TestServer::start_model(model, setup, config);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let body = json!({"model": MODEL, "prompt": [1, 2, 3], "max_tokens": 2,
        "kv_transfer_params": {"do_remote_decode": true, "transfer_id": "steal",
                               "remote_host": "127.0.0.1", "remote_port": port}});
    let c = common::client();
    let send = |body: &serde_json::Value, router: bool| {
        let mut r = c
            .post(server.url("/v1/completions"))
            .bearer_auth("sk-client")
            .json(body);
        if router {
            r = r.header(pagoda_api_keys::ROUTER_KEY_HEADER, "sk-router");
        }
        async move {
            let r = r.send().await.unwrap();
            (
                r.status().as_u16(),
                r.json::<serde_json::Value>().await.unwrap(),
            )
        }
    };
    let (status, v) = send(&body, true).await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(
        error_of(&v)["param"],
        "kv_transfer_params.remote_host",
        "{v}"
    );
    // An allowed destination: refused to the client's key alone, taken with the router's.
    let mut allowed = body.clone();
    allowed["kv_transfer_params"]["remote_host"] = json!("127.0.0.1");
    allowed["kv_transfer_params"]["remote_port"] = json!(1);
    let (status, v) = send(&allowed, false).await;
    assert_eq!(status, 403, "{v}");
    assert!(
        error_of(&v)["message"].as_str().unwrap().contains("router"),
        "{v}"
    );
    let (status, v) = send(&allowed, true).await;
    assert_eq!(status, 200, "{v}");
    listener.set_nonblocking(true).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        listener.accept().map(|_| ()).unwrap_err().kind(),
        ErrorKind::WouldBlock,
        "the server connected to the client's address"
    );
    server.stop();
    server.join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
