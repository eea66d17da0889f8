//! End-to-end runs of the bench client against a small axum server in this file that speaks the
//! OpenAI streaming format (and vLLM's `/tokenize`), with a deterministic token count: one token
//! per word, two for words longer than six characters.
#![allow(clippy::unwrap_used)]

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::StreamExt;
use pagoda_bench::*;
use pagoda_protocol::*;
use serde_json::json;

struct Mock {
    /// Delay between streamed tokens.
    token_delay: Duration,
    /// Every n-th request fails with 503.
    fail_every: Option<usize>,
    /// Every n-th request breaks mid-stream with an error event.
    error_event_every: Option<usize>,
    requests: AtomicUsize,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
}

fn count_tokens(text: &str) -> u32 {
    text.split_whitespace()
        .map(|w| if w.len() > 6 { 2 } else { 1 })
        .sum()
}

async fn tokenize(Json(req): Json<TokenizeRequest>) -> Response {
    if !req.extra.is_empty() {
        return (
            StatusCode::BAD_REQUEST,
            Json(ErrorResponse::unknown_parameter(
                req.extra.keys().next().unwrap(),
            )),
        )
            .into_response();
    }
    let n = count_tokens(req.prompt.as_deref().unwrap_or(""));
    Json(TokenizeResponse {
        count: n,
        max_model_len: Some(4096),
        tokens: (0..n).collect(),
        token_strs: None,
    })
    .into_response()
}

async fn models() -> Json<ModelList> {
    Json(ModelList::new(vec![ModelCard::new(
        "mock-model",
        0,
        "test",
    )]))
}

struct Job {
    chat: bool,
    prompt_tokens: u32,
    max_tokens: u32,
}

async fn completions(State(m): State<Arc<Mock>>, Json(req): Json<CompletionRequest>) -> Response {
    assert_eq!(req.stream, Some(true));
    assert_eq!(req.stream_options.and_then(|o| o.include_usage), Some(true));
    let Prompt::Text(prompt) = req.prompt else {
        panic!("text prompt expected")
    };
    stream(
        m,
        Job {
            chat: false,
            prompt_tokens: count_tokens(&prompt),
            max_tokens: req.max_tokens.unwrap(),
        },
    )
}

async fn chat(State(m): State<Arc<Mock>>, Json(req): Json<ChatCompletionRequest>) -> Response {
    assert!(req.extra.is_empty());
    // Prompt tokens: every message's words plus 3 per message for a pretend template.
    let prompt_tokens = req
        .messages
        .iter()
        .map(|msg| match &msg.content {
            Some(MessageContent::Text(t)) => count_tokens(t) + 3,
            _ => 3,
        })
        .sum();
    stream(
        m,
        Job {
            chat: true,
            prompt_tokens,
            max_tokens: req.max_tokens.unwrap(),
        },
    )
}

fn stream(m: Arc<Mock>, job: Job) -> Response {
    let n = m.requests.fetch_add(1, Ordering::SeqCst) + 1;
    if m.fail_every.is_some_and(|k| n.is_multiple_of(k)) {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(ErrorResponse::overloaded("queue full")),
        )
            .into_response();
    }
    let now = m.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    m.max_in_flight.fetch_max(now, Ordering::SeqCst);
    let break_mid = m.error_event_every.is_some_and(|k| n.is_multiple_of(k));

    let mut events: Vec<String> = Vec::new();
    let chunk =
        |text: Option<&str>, finish: Option<FinishReason>, usage: Option<Usage>| -> String {
            let value = if job.chat {
                let choices = match (text, finish) {
                    (None, None) => vec![],
                    _ => vec![ChatChunkChoice {
                        index: 0,
                        delta: ChatDelta {
                            content: text.map(str::to_owned),
                            ..Default::default()
                        },
                        logprobs: None,
                        finish_reason: finish,
                        stop_reason: None,
                    }],
                };
                serde_json::to_value(ChatCompletionChunk {
                    id: "chatcmpl-1".into(),
                    object: ChatCompletionChunk::OBJECT.into(),
                    created: 0,
                    model: "mock-model".into(),
                    choices,
                    usage,
                    system_fingerprint: None,
                    service_tier: None,
                })
            } else {
                let choices = match (text, finish) {
                    (None, None) => vec![],
                    _ => vec![CompletionChoice {
                        index: 0,
                        text: text.unwrap_or("").to_owned(),
                        logprobs: None,
                        finish_reason: finish,
                        stop_reason: None,
                        prompt_logprobs: None,
                    }],
                };
                serde_json::to_value(CompletionStreamChunk {
                    id: "cmpl-1".into(),
                    object: CompletionResponse::OBJECT.into(),
                    created: 0,
                    model: "mock-model".into(),
                    choices,
                    usage,
                    system_fingerprint: None,
                })
            };
            sse::encode_data(&value.unwrap()).unwrap()
        };
    if job.chat {
        events.push(sse::encode_data(&json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0,
            "model": "mock-model", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
            "logprobs": null, "finish_reason": null}]})).unwrap());
    }
    events.push(": keep-alive comment\n\n".to_owned());
    for i in 0..job.max_tokens {
        if break_mid && i == 2 {
            events.push(sse::encode_error(&ErrorResponse::server_error(
                "engine failed",
            )));
            break;
        }
        events.push(chunk(Some(&format!(" w{i}")), None, None));
    }
    if !break_mid {
        events.push(chunk(None, Some(FinishReason::Length), None));
        events.push(chunk(
            None,
            None,
            Some(Usage::new(job.prompt_tokens, job.max_tokens)),
        ));
        events.push(sse::DONE_EVENT.to_owned());
    }
    // Cut every event in two pieces at an odd place, and \r\n-terminate some lines, so the
    // client's parser sees realistic fragmentation.
    let mut pieces: Vec<Bytes> = Vec::new();
    for (i, e) in events.into_iter().enumerate() {
        let e = if i % 3 == 0 {
            e.replace('\n', "\r\n")
        } else {
            e
        };
        let cut = e.len() / 3;
        pieces.push(Bytes::from(e[..cut].to_owned()));
        pieces.push(Bytes::from(e[cut..].to_owned()));
    }
    let delay = m.token_delay;
    let m2 = Arc::clone(&m);
    let total = pieces.len();
    let body =
        futures_util::stream::iter(pieces.into_iter().enumerate()).then(move |(i, piece)| {
            let m = Arc::clone(&m2);
            async move {
                if i % 2 == 1 {
                    tokio::time::sleep(delay).await;
                }
                if i + 1 == total {
                    m.in_flight.fetch_sub(1, Ordering::SeqCst);
                }
                Ok::<_, Infallible>(piece)
            }
        });
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .body(Body::from_stream(body))
        .unwrap()
}

async fn start(
    token_delay_ms: u64,
    fail_every: Option<usize>,
    error_event_every: Option<usize>,
) -> (String, Arc<Mock>) {
    let mock = Arc::new(Mock {
        token_delay: Duration::from_millis(token_delay_ms),
        fail_every,
        error_event_every,
        requests: AtomicUsize::new(0),
        in_flight: AtomicUsize::new(0),
        max_in_flight: AtomicUsize::new(0),
    });
    let app = axum::Router::new()
        .route("/v1/models", get(models))
        .route("/tokenize", post(tokenize))
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat))
        .with_state(Arc::clone(&mock));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    // Without TCP_NODELAY, small SSE writes meet delayed ACKs and TTFT gains about 40 ms.
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, mock)
}

fn config(urls: &[&str], api: Api, kind: WorkloadKind, loads: Vec<Load>, n: usize) -> BenchConfig {
    BenchConfig {
        targets: urls
            .iter()
            .map(|u| Target {
                base_url: (*u).to_owned(),
                api_key: Some("k".into()),
                model: "mock-model".into(),
            })
            .collect(),
        api,
        workload: WorkloadSpec {
            kind,
            input_len: LengthDist::Fixed { n: 30 },
            output_len: Some(LengthDist::Fixed { n: 8 }),
            num_groups: 2,
            prefix_len: 20,
            num_turns: 3,
            dataset_path: None,
            seed: 11,
            prefix_seed: None,
        },
        loads,
        num_requests: n,
        duration: None,
        warmup: 2,
        sampling: SamplingSettings {
            ignore_eos: true,
            temperature: None,
        },
        slo: Slo {
            ttft_ms: Some(5_000.0),
            tpot_ms: Some(1_000.0),
            e2e_ms: None,
        },
        arrival_seed: None,
        timeout: Duration::from_secs(30),
        rounds: 1,
        use_tokenize: true,
        progress: false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_closed_loop_counts_match_usage() {
    let (url, mock) = start(2, None, None).await;
    assert_eq!(
        first_model(&runner::http_client().unwrap(), &url, None)
            .await
            .unwrap(),
        "mock-model"
    );
    let cfg = config(
        &[&url],
        Api::Completions,
        WorkloadKind::Random,
        vec![Load::Concurrency { concurrency: 4 }],
        20,
    );
    let report = run_bench(cfg).await.unwrap();
    assert_eq!(
        report.prompt_length_method,
        tokens::CountMethod::TokenizePrompt
    );
    assert_eq!(report.points.len(), 1);
    let p = &report.points[0];
    assert_eq!((p.summary.completed, p.summary.failed), (20, 0));
    for r in &p.records {
        // Prompts were built to exactly 30 tokens by the server's own count.
        assert_eq!(r.prompt_tokens, Some(30));
        assert_eq!(r.expected_input_tokens, 30);
        assert_eq!(r.completion_tokens, Some(8));
        assert_eq!(r.text_chunks, 8);
        assert_eq!(r.itl_ms.len(), 7);
        assert!(
            r.ttft_ms.unwrap() > 0.0 && r.tpot_ms.unwrap() > 0.0 && r.e2e_ms >= r.ttft_ms.unwrap()
        );
        assert_eq!(r.finish_reason.as_deref(), Some("length"));
    }
    assert_eq!(
        p.records.iter().map(|r| r.index).collect::<Vec<_>>(),
        (0..20).collect::<Vec<_>>()
    );
    assert_eq!(p.summary.total_input_tokens, 600);
    assert_eq!(p.summary.total_output_tokens, 160);
    assert_eq!(p.summary.goodput.good_requests, 20);
    assert!(p.summary.max_in_flight <= 4);
    assert!(mock.max_in_flight.load(Ordering::SeqCst) <= 4);
    // Warmup (2) + measured (20) requests reached the server.
    assert_eq!(mock.requests.load(Ordering::SeqCst), 22);

    let json: serde_json::Value = serde_json::to_value(&report).unwrap();
    for key in ["settings", "prompt_length_method", "points", "comparisons"] {
        assert!(json.get(key).is_some(), "{key}");
    }
    let point = &json["points"][0];
    for key in [
        "completed",
        "failed",
        "duration_s",
        "request_throughput",
        "input_tokens_per_s",
        "output_tokens_per_s",
        "ttft_ms",
        "tpot_ms",
        "itl_ms",
        "e2e_ms",
        "goodput",
        "max_in_flight",
    ] {
        assert!(point["summary"].get(key).is_some(), "summary.{key}");
    }
    assert_eq!(point["records"].as_array().unwrap().len(), 20);
    assert!(
        json["settings"]["targets"][0].get("api_key").is_none(),
        "the API key must not be written out"
    );
    let text = report::render(&report);
    assert!(text.contains("TTFT") && text.contains("Goodput"));
    assert!(!text.contains("prefix cache"), "no cached tokens, no note");
    // A random workload whose prompts the server had cached (a rerun with the same seed).
    let mut report = report;
    report.points[0].summary.total_cached_tokens = 300;
    assert!(
        report::render(&report).contains("300 prompt tokens came from the server's prefix cache"),
        "cached tokens on a random workload are pointed out"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_multi_turn_carries_history_under_a_concurrency_cap() {
    let (url, mock) = start(1, None, None).await;
    let load = Load::Rate {
        rate: 200.0,
        burstiness: 1.0,
        max_concurrency: Some(2),
    };
    let cfg = config(&[&url], Api::Chat, WorkloadKind::MultiTurn, vec![load], 7);
    let report = run_bench(cfg).await.unwrap();
    let p = &report.points[0];
    assert_eq!(p.summary.completed, 7);
    assert!(mock.max_in_flight.load(Ordering::SeqCst) <= 2);
    // Conversation 0: turn k carries k earlier user turns and answers (8 tokens each, as
    // " w0 .. w7") plus its own 30-token message, with 3 tokens per message.
    let conv0: Vec<_> = p
        .records
        .iter()
        .filter(|r| r.conversation == Some(0))
        .collect();
    assert_eq!(conv0.len(), 3);
    for (k, r) in conv0.iter().enumerate() {
        assert_eq!(r.turn, Some(k));
        let k = k as u32;
        assert_eq!(r.prompt_tokens, Some(33 * (k + 1) + 11 * k), "turn {k}");
    }
    // 7 requests in turns of 3: the last conversation has one turn.
    assert_eq!(
        p.records
            .iter()
            .filter(|r| r.conversation == Some(2))
            .count(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_prefix_sweep_and_compare_produce_ratios_and_a_chart() {
    let (fast, _) = start(1, None, None).await;
    let (slow, _) = start(6, None, None).await;
    let loads = vec![
        Load::Concurrency { concurrency: 1 },
        Load::Concurrency { concurrency: 4 },
    ];
    let mut cfg = config(
        &[&fast, &slow],
        Api::Completions,
        WorkloadKind::SharedPrefix,
        loads,
        8,
    );
    cfg.rounds = 2;
    cfg.warmup = 0;
    let report = run_bench(cfg).await.unwrap();
    assert_eq!(report.points.len(), 4);
    assert_eq!(report.comparisons.len(), 2);
    for p in &report.points {
        // Two rounds of 8 requests each.
        assert_eq!(p.summary.completed, 16);
        // System prompt (20) + question (30) in the flattened prompt; the labels "System:" (2
        // tokens: longer than six characters), "User:" (1) and "Assistant:" (2) add 5.
        assert!(p.records.iter().all(|r| r.prompt_tokens == Some(55)));
    }
    for c in &report.comparisons {
        assert!(
            c.tpot_p50 > 1.5,
            "slow server should have a larger TPOT: {c:?}"
        );
        assert!(c.output_tokens_per_s < 1.0);
    }
    let svg = chart::sweep_svg(&report).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("TTFT p99") && svg.contains("good"));
    let text = report::render(&report);
    assert!(text.contains("ratios") && text.contains("sweep"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_are_counted_with_their_status() {
    let (url, _) = start(1, Some(4), Some(5)).await;
    let mut cfg = config(
        &[&url],
        Api::Chat,
        WorkloadKind::Random,
        vec![Load::Concurrency { concurrency: 1 }],
        20,
    );
    cfg.warmup = 0;
    let report = run_bench(cfg).await.unwrap();
    let p = &report.points[0];
    // Requests 4, 8, 12, 16, 20 answer 503; 5, 10, 15 break with an error event.
    assert_eq!(p.summary.failed, 8);
    assert_eq!(p.summary.completed, 12);
    let statuses: Vec<Option<u16>> = p
        .records
        .iter()
        .filter_map(|r| r.error.as_ref().map(|e| e.status))
        .collect();
    assert_eq!(statuses.iter().filter(|s| **s == Some(503)).count(), 5);
    let mid: Vec<_> = p
        .records
        .iter()
        .filter_map(|r| r.error.as_ref())
        .filter(|e| e.message == "engine failed")
        .collect();
    assert_eq!(mid.len(), 3);
    assert!(report::render(&report).contains("HTTP 503: queue full"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_loop_duration_bound_stops_the_run() {
    let (url, mock) = start(1, None, None).await;
    let load = Load::Rate {
        rate: 20.0,
        burstiness: 1.0,
        max_concurrency: None,
    };
    let mut cfg = config(
        &[&url],
        Api::Completions,
        WorkloadKind::Random,
        vec![load],
        1000,
    );
    cfg.warmup = 0;
    cfg.use_tokenize = false;
    cfg.duration = Some(Duration::from_millis(500));
    let report = run_bench(cfg).await.unwrap();
    let sent = report.points[0].records.len();
    // About 10 arrivals in 0.5 s at 20/s; far from the 1000 prepared.
    assert!((2..40).contains(&sent), "{sent}");
    assert_eq!(mock.requests.load(Ordering::SeqCst), sent);
    assert_eq!(
        report.prompt_length_method,
        tokens::CountMethod::ApproxByWords
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn command_line_run_writes_json_and_chart() {
    use clap::Parser;
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        bench: BenchArgs,
    }
    let (url, _) = start(1, None, None).await;
    let dir = std::env::temp_dir().join(format!("pagoda-bench-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("run.json");
    let cli = Cli::try_parse_from([
        "bench",
        "--base-url",
        &url,
        "--request-rate",
        "50,inf",
        "--num-requests",
        "6",
        "--input-len",
        "10..20",
        "--output-len",
        "4",
        "--ignore-eos",
        "--slo-ttft",
        "1000",
        "--no-progress",
        "--output",
        out.to_str().unwrap(),
    ])
    .unwrap();
    let report = run_async(cli.bench).await.unwrap();
    assert_eq!(report.settings.targets[0].model, "mock-model");
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(written["points"].as_array().unwrap().len(), 2);
    for p in written["points"].as_array().unwrap() {
        for r in p["records"].as_array().unwrap() {
            let n = r["prompt_tokens"].as_u64().unwrap();
            assert!((10..=20).contains(&n), "{n}");
            assert_eq!(r["completion_tokens"], 4);
        }
    }
    let svg = std::fs::read_to_string(out.with_extension("svg")).unwrap();
    assert!(svg.contains("TPOT p99") && svg.contains("SLO 1000 ms"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sweep_climbs_while_the_slo_holds_and_writes_the_rate_chart() {
    use clap::Parser;
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        bench: BenchArgs,
    }
    let (url, _) = start(5, None, None).await;
    let dir = std::env::temp_dir().join(format!("pagoda-bench-sweep-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("sweep.json");
    let args = |slo: &str| {
        Cli::try_parse_from([
            "bench",
            "--base-url",
            &url,
            "--sweep",
            "--slo",
            slo,
            "--request-rate",
            "20",
            "--sweep-max-probes",
            "3",
            "--num-requests",
            "6",
            "--input-len",
            "10",
            "--output-len",
            "4",
            "--ignore-eos",
            "--no-progress",
            "--output",
            out.to_str().unwrap(),
        ])
        .unwrap()
        .bench
    };
    // Tokens every 5 ms: a 50 ms TPOT target holds at every rate, so the ladder doubles.
    let report = run_async(args("ttft=2s,tpot=50ms")).await.unwrap();
    let sweep = report.sweep.as_ref().unwrap();
    let rates: Vec<f64> = sweep.probes.iter().map(|p| p.rate).collect();
    assert_eq!(rates, [20.0, 40.0, 80.0]);
    assert_eq!(sweep.max_rate_rps, Some(80.0));
    assert!(sweep.max_goodput_rps > 0.0);
    assert_eq!(report.points.len(), 3);
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(written["sweep"]["max_rate_rps"], 80.0);
    let svg = std::fs::read_to_string(out.with_extension("svg")).unwrap();
    assert!(svg.contains("TTFT p90") && svg.contains("goodput") && svg.contains("SLO 50 ms"));
    // A 1 ms target never holds: the search halves down and reports no rate.
    let report = run_async(args("ttft=2s,tpot=1ms")).await.unwrap();
    let sweep = report.sweep.as_ref().unwrap();
    assert_eq!(sweep.max_rate_rps, None);
    assert_eq!(sweep.lowest_failing_rps, Some(5.0));
    assert!(sweep.probes.iter().all(|p| !p.meets_slo));
    std::fs::remove_dir_all(&dir).unwrap();
}
