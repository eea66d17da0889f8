//! `pagoda bench` against the real `pagoda serve` (SmolLM2, in-process on a free port): a short
//! closed-loop run completes, every request's token counts match what was asked and what the
//! server reported in `usage`, and the JSON report has every field.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::time::Duration;

use pagoda_bench::*;
use pagoda_model::EngineSetup;
use pagoda_server::ServerConfig;

fn model_path() -> PathBuf {
    std::env::var_os("PAGODA_MODEL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/pagoda/models")
        })
        .join("SmolLM2-135M-Instruct.Q4_1.gguf")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_run_against_pagoda_serve() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let setup = EngineSetup {
        kv_cache_memory: Some(64 << 20),
        max_model_len: Some(1024),
        ..EngineSetup::default()
    };
    let config = ServerConfig {
        served_model_name: "smol".into(),
        ..ServerConfig::default()
    };
    let path = model_path();
    let state = tokio::task::spawn_blocking(move || pagoda_server::load(&path, &setup, config))
        .await
        .unwrap()
        .unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(pagoda_server::serve(listener, state, async move {
        let _ = stop_rx.await;
    }));

    let http = runner::http_client().unwrap();
    assert_eq!(first_model(&http, &url, None).await.unwrap(), "smol");
    let cfg = BenchConfig {
        targets: vec![Target {
            base_url: url.clone(),
            api_key: None,
            model: "smol".into(),
        }],
        api: Api::Completions,
        workload: WorkloadSpec {
            kind: WorkloadKind::Random,
            input_len: LengthDist::Fixed { n: 32 },
            output_len: Some(LengthDist::Fixed { n: 8 }),
            num_groups: 1,
            prefix_len: 0,
            num_turns: 1,
            dataset_path: None,
            seed: 5,
            prefix_seed: None,
        },
        loads: vec![Load::Concurrency { concurrency: 4 }],
        num_requests: 12,
        duration: None,
        warmup: 1,
        sampling: SamplingSettings {
            ignore_eos: true,
            temperature: None,
        },
        slo: Slo {
            ttft_ms: Some(60_000.0),
            tpot_ms: Some(60_000.0),
            e2e_ms: None,
        },
        arrival_seed: None,
        timeout: Duration::from_secs(120),
        rounds: 1,
        use_tokenize: true,
        progress: false,
    };
    let report = run_bench(cfg).await.unwrap();
    assert_eq!(
        report.prompt_length_method,
        tokens::CountMethod::TokenizePrompt
    );
    let p = &report.points[0];
    assert_eq!((p.summary.completed, p.summary.failed), (12, 0));
    for r in &p.records {
        // The prompt was built to 32 tokens with the server's own tokenizer, and the server's
        // usage says so (BOS included by both).
        assert_eq!(r.prompt_tokens, Some(r.expected_input_tokens));
        assert_eq!(r.completion_tokens, Some(8));
        assert_eq!(r.itl_ms.len() + 1, r.text_chunks as usize);
        assert!(r.ttft_ms.unwrap() > 0.0 && r.e2e_ms >= r.ttft_ms.unwrap());
        assert_eq!(r.finish_reason.as_deref(), Some("length"));
    }
    assert_eq!(p.summary.total_output_tokens, 96);
    assert!(p.summary.output_tokens_per_s > 0.0);
    let json = serde_json::to_value(&report).unwrap();
    for key in ["settings", "prompt_length_method", "points", "comparisons"] {
        assert!(json.get(key).is_some(), "{key}");
    }
    for key in [
        "ttft_ms",
        "tpot_ms",
        "itl_ms",
        "e2e_ms",
        "goodput",
        "request_throughput",
    ] {
        assert!(
            json["points"][0]["summary"].get(key).is_some(),
            "summary.{key}"
        );
    }
    let _ = stop_tx.send(());
    server.await.unwrap().unwrap();
}
