//! `pagoda serve --log-format json`: the real binary's stderr is one JSON object a line, and the
//! lines of a request carry its `X-Request-Id` (the client's, echoed on the response).
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

fn model() -> PathBuf {
    let dir = match std::env::var_os("PAGODA_MODEL_DIR") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/pagoda/models"),
    };
    dir.join("SmolLM2-135M-Instruct.Q4_1.gguf")
}

#[tokio::test]
async fn json_log_lines_carry_the_request_id() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let log = std::env::temp_dir().join(format!("pagoda-serve-logs-{}.log", std::process::id()));
    let mut child = Command::new(env!("CARGO_BIN_EXE_pagoda"))
        .args(["serve", "--log-format", "json", "--port", &port.to_string()])
        .args(["--kv-cache-memory", "64MiB", "--max-model-len", "1024"])
        .arg("--model")
        .arg(model())
        .env_remove("PAGODA_LOG")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let c = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let ready = c.get(format!("{base}/ready")).send().await;
        if ready.is_ok_and(|r| r.status() == 200) {
            break;
        }
        assert!(Instant::now() < deadline, "the server never got ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let res = c
        .post(format!("{base}/v1/completions"))
        .header("x-request-id", "log-check-7")
        .json(&json!({"model": "SmolLM2-135M-Instruct.Q4_1", "prompt": "Hi", "max_tokens": 2}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["x-request-id"], "log-check-7");
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    assert!(child.wait().unwrap().success());

    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(
        lines
            .iter()
            .all(|l| l["timestamp"].is_string() && l["level"].is_string())
    );
    let ours: Vec<&Value> = lines
        .iter()
        .filter(|l| l["span"]["request_id"] == "log-check-7")
        .collect();
    let response = ours
        .iter()
        .find(|l| l["fields"]["message"] == "response")
        .unwrap_or_else(|| panic!("no response line of the request in\n{text}"));
    assert_eq!(response["fields"]["status"], 200);
    assert_eq!(response["span"]["path"], "/v1/completions");
    std::fs::remove_file(&log).unwrap();
}
