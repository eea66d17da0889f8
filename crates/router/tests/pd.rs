//! Prefill/decode disaggregation against real `pagoda serve` replicas on loopback (SmolLM2,
//! `--threads 1`): one `--kv-role prefill`, one `--kv-role decode`, the router in-process. A
//! long prompt goes prefill -> transfer -> decode and its greedy output is the same as one
//! replica's (and `cached_tokens` shows the imported blocks were used); a short one is
//! prefilled on the decode replica; a transfer cut off mid-way (a relay that drops the
//! connection after a few KiB) falls back to a local prefill and completes; a peer without the
//! shared secret (`--kv-transfer-secret-file`, which both replicas share) is refused before
//! any frame is read; and afterwards neither side holds a block or a buffered transfer. Last,
//! the decode replica is killed mid-transfer: the request falls back to another replica and
//! the prefill side holds nothing. Then both roles again at three tensor-parallel ranks: the
//! same transfer, bit for bit. Needs the `pagoda` binary built.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{MODEL_NAME, Replica, free_port, model};

use pagoda_router::{PolicyKind, PromptTokenizer, RouterConfig, WorkerSpec};
use serde_json::{Value, json};

/// A replica with `extra` arguments.
fn start(extra: &[&str]) -> Replica {
    let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
    Replica::spawn(free_port(), &extra)
}

/// A prefill replica and a decode replica (its transfer endpoint on `kv_port`) sharing
/// `secret`, both with `extra` arguments.
fn pd_pair(secret: &str, kv_port: u16, extra: &[&str]) -> (Replica, Replica) {
    let port = kv_port.to_string();
    let both = ["--kv-transfer-secret-file", secret];
    let prefill = ["--kv-role", "prefill", "--kv-transfer-peers", "127.0.0.1"];
    let decode = [
        "--kv-role",
        "decode",
        "--kv-transfer-host",
        "127.0.0.1",
        "--kv-transfer-port",
        &port,
    ];
    (
        start(&[&both[..], &prefill, extra].concat()),
        start(&[&both[..], &decode, extra].concat()),
    )
}

/// An in-process router: `decode` (with its transfer endpoint `kv`) and one prefill replica,
/// and `plain` as an ordinary replica to fall back on.
async fn router(decode: &Replica, kv: &str, prefill: &Replica, plain: Option<&Replica>) -> String {
    let mut workers = vec![WorkerSpec::parse(&format!("{},kv={kv}", decode.url)).unwrap()];
    workers.extend(plain.map(|p| WorkerSpec::parse(&p.url).unwrap()));
    let config = RouterConfig {
        workers,
        dns: None,
        policy: PolicyKind::RoundRobin,
        tokenizer: Some(Arc::new(PromptTokenizer::open(&model(), None).unwrap())),
        hash_seed: "0".into(),
        tenant_salts: None,
        router_key: None,
        tuning: Default::default(),
        poll_interval: Duration::from_millis(200),
        connect_timeout: Duration::from_secs(2),
        max_request_bytes: 8 << 20,
        prefill: vec![WorkerSpec::parse(&prefill.url).unwrap()],
        pd_threshold: 64,
        // Far above the fallback bounds below, so that a fallback within them is not this timeout.
        pd_prefill_timeout: Duration::from_secs(300),
    };
    common::serve_router(config).await
}

async fn complete(c: &reqwest::Client, url: &str, prompt: &str, salt: &str) -> Value {
    let body = json!({"model": MODEL_NAME, "prompt": prompt, "max_tokens": 24,
                      "temperature": 0, "cache_salt": salt});
    let r = c
        .post(format!("{url}/v1/completions"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "via {url}");
    r.json().await.unwrap()
}

fn text(v: &Value) -> &str {
    v["choices"][0]["text"].as_str().unwrap()
}

fn cached_tokens(v: &Value) -> u64 {
    v["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap_or(0)
}

/// How long a fallback may take: a hang detector with room for a loaded machine (the test
/// binaries run two at a time), well under `pd_prefill_timeout`.
const FALLBACK_BOUND: Duration = Duration::from_secs(90);

/// The value of the series `name` (first sample) in `url`'s /metrics.
async fn metric(c: &reqwest::Client, url: &str, name: &str) -> f64 {
    let text = c
        .get(format!("{url}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{name} missing from {url}/metrics"))
}

/// Waits until `name` on `url` is `want` (metrics are published after each step).
async fn settles(c: &reqwest::Client, url: &str, name: &str, want: f64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let v = metric(c, url, name).await;
        if v == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{name} on {url} is {v}, not {want}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Relays connections to `to`, cutting each off after `limit` bytes from the sender: a
/// transfer that dies mid-way (past the handshake, whose answers are relayed back). Both
/// directions close at once: the decode side sees the stream end inside a frame.
fn cutting_relay(to: String, limit: usize) -> String {
    relay(to, limit, |_| {})
}

/// Relays connections to `to`, forwarding `limit` bytes from the sender and then nothing
/// more (a transfer stalled mid-way, announced on `stalled`); once the receiver's side ends
/// (the decode replica died) both connections are closed.
fn stalling_relay(
    to: String,
    limit: usize,
    stalled: tokio::sync::mpsc::UnboundedSender<()>,
) -> String {
    relay(to, limit, move |back| {
        let _ = stalled.send(());
        let _ = back.join();
    })
}

/// Relays each connection to `to`: the receiver's answers back in full, the sender's first
/// `limit` bytes on; then `end` (given the thread relaying answers back) returns when both
/// connections are to close.
fn relay(
    to: String,
    limit: usize,
    end: impl Fn(std::thread::JoinHandle<()>) + Send + 'static,
) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut from) = conn else { continue };
            let Ok(mut out) = TcpStream::connect(&to) else {
                continue;
            };
            let (Ok(mut back_from), Ok(mut back_to)) = (out.try_clone(), from.try_clone()) else {
                continue;
            };
            let back = std::thread::spawn(move || {
                let _ = std::io::copy(&mut back_from, &mut back_to);
            });
            forward_up_to(&mut from, &mut out, limit);
            end(back);
            let _ = out.shutdown(std::net::Shutdown::Both);
            let _ = from.shutdown(std::net::Shutdown::Both);
        }
    });
    addr
}

/// Copies at most `limit` bytes from `from` to `out` (less if either side closes first).
fn forward_up_to(from: &mut TcpStream, out: &mut TcpStream, limit: usize) {
    let mut buf = vec![0u8; 16 << 10];
    let mut n = 0;
    while n < limit {
        let want = (limit - n).min(buf.len());
        match from.read(&mut buf[..want]) {
            Ok(0) | Err(_) => break,
            Ok(k) => {
                if out.write_all(&buf[..k]).is_err() {
                    break;
                }
                n += k;
            }
        }
    }
}

fn long_prompt(topic: &str) -> String {
    (0..30)
        .map(|i| format!("Fact {i} about {topic}: it is worth knowing and easy to recall."))
        .collect::<Vec<_>>()
        .join(" ")
        + " In one sentence, the most important fact is"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefill_transfer_decode_matches_one_replica_and_failures_fall_back() {
    if !model().is_file() {
        eprintln!(
            "skipped: {} missing (scripts/fetch-models.sh)",
            model().display()
        );
        return;
    }
    let kv_port = free_port();
    let dir = std::env::temp_dir().join(format!("pagoda-pd-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let secret = dir.join("kv.secret");
    std::fs::write(
        &secret,
        "dGhlIHNoYXJlZCBzZWNyZXQgb2YgdGhpcyB0ZXN0
",
    )
    .unwrap();
    let secret = secret.to_string_lossy().into_owned();
    let (prefill, decode) = pd_pair(&secret, kv_port, &["--kv-transfer-timeout", "3"]);
    let c = reqwest::Client::new();
    prefill.wait_ready(&c).await;
    decode.wait_ready(&c).await;
    let kv = format!("127.0.0.1:{kv_port}");
    let r = router(&decode, &kv, &prefill, None).await;
    let prompt = long_prompt("rivers");

    // One replica doing both (the prefill replica serves plain requests too).
    let alone = complete(&c, &prefill.url, &prompt, "alone").await;
    // Prefill there, KV over TCP, decode here: the same tokens, the prompt's KV imported.
    let split = complete(&c, &r, &prompt, "split").await;
    assert_eq!(text(&split), text(&alone));
    let prompt_tokens = split["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(prompt_tokens > 256, "{prompt_tokens}");
    let full_blocks = (prompt_tokens - 1) / 16 * 16;
    assert_eq!(cached_tokens(&split), full_blocks, "{split}");
    assert_eq!(metric(&c, &r, "pagoda_router:pd_remote_total").await, 1.0);
    let received = metric(&c, &decode.url, "pagoda:kv_transfer_blocks_received_total").await;
    assert!(received >= (prompt_tokens / 16) as f64, "{received}");
    assert!(metric(&c, &prefill.url, "pagoda:kv_transfer_bytes_sent_total").await > 0.0);

    // A short prompt is prefilled on the decode replica.
    let short = complete(&c, &r, "The capital of France is", "short").await;
    assert!(!text(&short).is_empty());
    assert_eq!(metric(&c, &r, "pagoda_router:pd_local_total").await, 1.0);

    // A transfer cut off after 64 KiB: the decode replica prefills itself, same output.
    let relay = cutting_relay(kv.clone(), 64 << 10);
    let r2 = router(&decode, &relay, &prefill, None).await;
    let started = Instant::now();
    let cut = complete(&c, &r2, &prompt, "cut").await;
    assert_eq!(text(&cut), text(&alone));
    assert_eq!(cached_tokens(&cut), 0, "nothing was imported: {cut}");
    assert!(started.elapsed() < FALLBACK_BOUND);
    settles(
        &c,
        &decode.url,
        "pagoda:kv_transfer_receive_failures_total",
        1.0,
    )
    .await;
    assert_eq!(
        metric(&c, &decode.url, "pagoda:kv_transfer_fallbacks_total").await,
        1.0
    );

    // A peer without the secret writing a transfer's first frame: refused unread, counted.
    let mut intruder = TcpStream::connect(&kv).unwrap();
    let _ = intruder.write_all(b"PGKX\x01\x00\x00\x00\x00");
    let _ = intruder.read_to_end(&mut Vec::new());
    settles(
        &c,
        &decode.url,
        "pagoda:kv_transfer_auth_failures_total",
        1.0,
    )
    .await;

    // No blocks are left held on either side, and no received block waits unclaimed.
    for url in [&prefill.url, &decode.url] {
        settles(&c, url, "pagoda:kv_cache_usage_perc", 0.0).await;
        settles(&c, url, "pagoda:kv_transfer_in_flight", 0.0).await;
        settles(&c, url, "pagoda:num_requests_running", 0.0).await;
    }
    settles(&c, &decode.url, "pagoda:kv_transfer_buffered_blocks", 0.0).await;

    // The decode replica killed (SIGKILL) while a transfer to it is under way (a relay has
    // passed it 64 KiB, then holds the rest): the router falls back to an ordinary replica
    // (the prefill one) with the same greedy output, and the prefill side ends the transfer
    // and holds no block, as before the request.
    let (stalled_tx, mut stalled) = tokio::sync::mpsc::unbounded_channel();
    let relay = stalling_relay(kv.clone(), 64 << 10, stalled_tx);
    let r3 = router(&decode, &relay, &prefill, Some(&prefill)).await;
    let started = Instant::now();
    let request = tokio::spawn({
        let (c, r3, prompt) = (c.clone(), r3.clone(), prompt.clone());
        async move { complete(&c, &r3, &prompt, "killed").await }
    });
    tokio::time::timeout(FALLBACK_BOUND, stalled.recv())
        .await
        .expect("the transfer never reached the relay");
    decode.signal("-KILL");
    let answer = tokio::time::timeout(FALLBACK_BOUND, request)
        .await
        .expect("the request hung after its decode replica died")
        .unwrap();
    assert_eq!(text(&answer), text(&alone));
    assert!(started.elapsed() < FALLBACK_BOUND);
    settles(&c, &prefill.url, "pagoda:kv_transfer_in_flight", 0.0).await;
    settles(&c, &prefill.url, "pagoda:kv_cache_usage_perc", 0.0).await;
    settles(&c, &prefill.url, "pagoda:num_requests_running", 0.0).await;
    drop((prefill, decode));

    tensor_parallel_replicas_transfer_whole_blocks(&c, &secret, &prompt).await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// Both roles at three tensor-parallel ranks (SmolLM2's 3 KV heads, one a rank): the prefill
/// side merges its ranks' parts of each block into the whole payload the wire carries, the
/// decode side splits it back over its ranks, and the decode runs on exactly the KV a
/// three-rank replica computes alone, so its greedy output is that replica's, bit for bit.
async fn tensor_parallel_replicas_transfer_whole_blocks(
    c: &reqwest::Client,
    secret: &str,
    prompt: &str,
) {
    let kv_port = free_port();
    let (prefill, decode) = pd_pair(secret, kv_port, &["--tensor-parallel-size", "3"]);
    prefill.wait_ready(c).await;
    decode.wait_ready(c).await;
    for url in [&prefill.url, &decode.url] {
        assert_eq!(metric(c, url, "pagoda:tp_size").await, 3.0);
    }
    let r = router(&decode, &format!("127.0.0.1:{kv_port}"), &prefill, None).await;
    let alone = complete(c, &prefill.url, prompt, "tp-alone").await;
    let split = complete(c, &r, prompt, "tp-split").await;
    assert_eq!(text(&split), text(&alone));
    let prompt_tokens = split["usage"]["prompt_tokens"].as_u64().unwrap();
    assert_eq!(
        cached_tokens(&split),
        (prompt_tokens - 1) / 16 * 16,
        "{split}"
    );
    assert_eq!(metric(c, &r, "pagoda_router:pd_remote_total").await, 1.0);
    let received = metric(c, &decode.url, "pagoda:kv_transfer_blocks_received_total").await;
    assert!(received >= (prompt_tokens / 16) as f64, "{received}");
    for url in [&prefill.url, &decode.url] {
        settles(c, url, "pagoda:kv_cache_usage_perc", 0.0).await;
        settles(c, url, "pagoda:kv_transfer_in_flight", 0.0).await;
    }
}
