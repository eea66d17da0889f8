//! `pagoda serve --kv-disk-dir`: a real restart of the binary (SmolLM2) keeps the prefix cache.
//! The first server computes a long prompt and, on SIGTERM, saves its cached blocks; the next
//! server on the directory answers the same prompt with `cached_tokens` for the whole prefix,
//! read from disk. A second server on a directory in use is refused with a clear error. A
//! server killed (SIGKILL) mid-write leaves a directory the next one starts on and serves from.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

fn model() -> PathBuf {
    let dir = match std::env::var_os("PAGODA_MODEL_DIR") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/pagoda/models"),
    };
    dir.join("SmolLM2-135M-Instruct.Q4_1.gguf")
}

use pagoda_testkit::free_port;

fn serve(port: u16, dir: &Path, stderr: Stdio) -> Child {
    Command::new(env!("CARGO_BIN_EXE_pagoda"))
        .args(["serve", "--port", &port.to_string()])
        .args(["--kv-cache-memory", "64MiB", "--max-model-len", "2048"])
        .arg("--kv-disk-dir")
        .arg(dir)
        .args(["--kv-disk-size", "1GiB"])
        .arg("--model")
        .arg(model())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap()
}

async fn wait_ready(c: &reqwest::Client, base: &str) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let ready = c.get(format!("{base}/ready")).send().await;
        if ready.is_ok_and(|r| r.status() == 200) {
            return;
        }
        assert!(Instant::now() < deadline, "the server never got ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn complete(c: &reqwest::Client, base: &str, prompt: &[u32]) -> Value {
    let res = c
        .post(format!("{base}/v1/completions"))
        .json(&json!({"model": "SmolLM2-135M-Instruct.Q4_1", "prompt": prompt, "max_tokens": 1, "temperature": 0}))
        .timeout(Duration::from_secs(120))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    res.json().await.unwrap()
}

fn stop(mut child: Child) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    assert!(child.wait().unwrap().success());
}

#[tokio::test]
async fn a_restarted_server_serves_a_long_prefix_from_disk() {
    let dir = std::env::temp_dir().join(format!("pagoda-kv-disk-restart-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // 1,000 tokens: 62 full blocks of 16 are cacheable (the last token is always computed).
    let prompt: Vec<u32> = (0..1000u32).map(|i| 1000 + (i * 37) % 20000).collect();
    let c = reqwest::Client::new();

    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let first = serve(port, &dir, Stdio::null());
    wait_ready(&c, &base).await;
    let cold = complete(&c, &base, &prompt).await;
    assert_eq!(cold["usage"]["prompt_tokens_details"]["cached_tokens"], 0);

    // A second server on the same directory is refused, and says why.
    let second = serve(free_port(), &dir, Stdio::piped());
    let out = second.wait_with_output().unwrap();
    assert!(
        !out.status.success(),
        "a second server on the directory started"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("in use by another pagoda server"), "{err}");

    stop(first);
    let files = std::fs::read_dir(&dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "kvb")
        })
        .count();
    assert!(files >= 62, "{files} block files after shutdown");

    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let again = serve(port, &dir, Stdio::null());
    wait_ready(&c, &base).await;
    let warm = complete(&c, &base, &prompt).await;
    assert_eq!(
        warm["usage"]["prompt_tokens_details"]["cached_tokens"], 992,
        "{warm}"
    );
    assert_eq!(warm["choices"][0]["text"], cold["choices"][0]["text"]);
    let metrics = c
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let read = metrics
        .lines()
        .find(|l| l.starts_with("pagoda:kv_disk_blocks_read_total"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    assert!(read >= 62, "{metrics}");

    // Killed (SIGKILL) while writing blocks: a second prompt computed, SIGTERM starts the
    // flush of its blocks, SIGKILL lands once the first of them is on disk. The next server
    // starts on what is left (a temp file cut off mid-write is deleted with a warning), serves
    // the first prompt whole from disk and the second with whatever prefix of it landed, each
    // with the text computed before.
    let second: Vec<u32> = (0..400u32).map(|i| 3000 + (i * 53) % 20000).collect();
    let second_cold = complete(&c, &base, &second).await;
    let blocks_before = block_files(&dir).0;
    let status = Command::new("kill")
        .args(["-TERM", &again.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(30);
    let (mut kvb, mut tmp) = block_files(&dir);
    while kvb + tmp <= blocks_before {
        assert!(
            Instant::now() < deadline,
            "the shutdown flush wrote nothing"
        );
        std::thread::sleep(Duration::from_micros(200));
        (kvb, tmp) = block_files(&dir);
    }
    kill(again);
    let (kvb, tmp) = block_files(&dir);
    eprintln!(
        "killed mid-flush: {} new blocks written, {tmp} cut off",
        kvb - blocks_before
    );

    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let log = dir.with_extension("log");
    let third = serve(
        port,
        &dir,
        Stdio::from(std::fs::File::create(&log).unwrap()),
    );
    wait_ready(&c, &base).await;
    assert_eq!(block_files(&dir).1, 0, "a partial block file was kept");
    if tmp > 0 {
        let log = std::fs::read_to_string(&log).unwrap();
        assert!(log.contains("deleting a partial block file"), "{log}");
    }
    let first_again = complete(&c, &base, &prompt).await;
    assert_eq!(
        first_again["usage"]["prompt_tokens_details"]["cached_tokens"],
        992
    );
    assert_eq!(
        first_again["choices"][0]["text"],
        cold["choices"][0]["text"]
    );
    let second_again = complete(&c, &base, &second).await;
    assert_eq!(
        second_again["choices"][0]["text"],
        second_cold["choices"][0]["text"]
    );
    kill(third);
    let _ = std::fs::remove_file(dir.with_extension("log"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The block files (`.kvb`) and temp files of writes under way (`.tmp`) in `dir`.
fn block_files(dir: &Path) -> (usize, usize) {
    let (mut kvb, mut tmp) = (0, 0);
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        match e.path().extension().and_then(|x| x.to_str()) {
            Some("kvb") => kvb += 1,
            Some("tmp") => tmp += 1,
            _ => {}
        }
    }
    (kvb, tmp)
}

fn kill(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}
