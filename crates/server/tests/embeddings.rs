//! `/v1/embeddings` against all-MiniLM-L6-v2 (fetched on demand): every input form, base64,
//! `dimensions`, `truncate_prompt_tokens`, the errors, `/v1/models`' task, concurrent requests
//! sharing forward passes, a short query answered between the steps of a long batch, and the
//! official `openai` client's `embeddings.create`; TEI's `/embed` truncation (its 413, `truncate`
//! from either end) and `prompt_name` on a model without prompts. One server for the whole
//! binary.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::path::PathBuf;
use std::process::Command;

use common::{TestServer, client, config, small_setup};
use pagoda_server::ServerConfig;
use serde_json::{Value, json};

fn minilm() -> PathBuf {
    common::fetched_dir("minilm", "all-MiniLM-L6-v2")
}

async fn post(server: &TestServer, path: &str, body: Value) -> (u16, Value) {
    let resp = client()
        .post(server.url(path))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap())
}

fn vector(v: &Value, i: usize) -> Vec<f32> {
    v["data"][i]["embedding"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

fn decode_base64(s: &str) -> Vec<f32> {
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut bits = 0u32;
    let mut n = 0;
    let mut bytes = Vec::new();
    for c in s.bytes().filter(|&c| c != b'=') {
        bits = bits << 6 | alphabet.iter().position(|&a| a == c).unwrap() as u32;
        n += 6;
        if n >= 8 {
            n -= 8;
            bytes.push((bits >> n) as u8);
        }
    }
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

fn message(v: &Value) -> String {
    v["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

async fn metric(server: &TestServer, name: &str) -> f64 {
    let text = client()
        .get(server.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next())
        .map(|v| v.parse().unwrap())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn embeddings_endpoint() {
    let server = TestServer::start_model(
        minilm(),
        small_setup(),
        ServerConfig {
            quantization: pagoda_hf::Quantization::None,
            max_batch_tokens: 512,
            ..config()
        },
    );
    let m = common::MODEL;

    // /v1/models says what the model serves.
    let models: Value = client()
        .get(server.url("/v1/models"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(models["data"][0]["task"], "embed", "{models}");
    assert_eq!(models["data"][0]["max_model_len"], 256, "{models}");

    // A string; its token ids ([CLS] hello world [SEP]) give the same vector.
    let (s, text) = post(
        &server,
        "/v1/embeddings",
        json!({"model": m, "input": "hello world"}),
    )
    .await;
    assert_eq!(s, 200, "{text}");
    assert_eq!(text["object"], "list");
    assert_eq!(text["data"][0]["object"], "embedding");
    assert_eq!(text["usage"]["prompt_tokens"], 4);
    assert_eq!(text["usage"]["total_tokens"], 4);
    let hello = vector(&text, 0);
    assert_eq!(hello.len(), 384);
    let norm: f32 = hello.iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-5, "norm {norm}");
    let (s, ids) = post(
        &server,
        "/v1/embeddings",
        json!({"model": m, "input": [101, 7592, 2088, 102]}),
    )
    .await;
    assert_eq!(s, 200, "{ids}");
    assert_eq!(vector(&ids, 0), hello);

    // Texts and token-id batches: one vector each, in order.
    let (s, many) = post(
        &server,
        "/v1/embeddings",
        json!({"model": m, "input": ["hello world", "A man is playing a guitar.", "Someone plays guitar."]}),
    )
    .await;
    assert_eq!(s, 200, "{many}");
    let idx: Vec<u64> = many["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["index"].as_u64().unwrap())
        .collect();
    assert_eq!(idx, [0, 1, 2]);
    assert_eq!(
        vector(&many, 0),
        hello,
        "batched with others, the same vector"
    );
    let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
    assert!(dot(&vector(&many, 1), &vector(&many, 2)) > dot(&vector(&many, 0), &vector(&many, 1)));
    let (s, batches) = post(
        &server,
        "/v1/embeddings",
        json!({"model": m, "input": [[101, 7592, 2088, 102], [101, 102]]}),
    )
    .await;
    assert_eq!(s, 200, "{batches}");
    assert_eq!(batches["data"].as_array().unwrap().len(), 2);
    assert_eq!(vector(&batches, 0), hello);

    // base64 holds the same little-endian f32s.
    let (s, b64) = post(
        &server,
        "/v1/embeddings",
        json!({"model": m, "input": "hello world", "encoding_format": "base64"}),
    )
    .await;
    assert_eq!(s, 200, "{b64}");
    assert_eq!(
        decode_base64(b64["data"][0]["embedding"].as_str().unwrap()),
        hello
    );

    // Errors: each a 400 naming its field.
    for (body, param, needle) in [
        (
            json!({"model": m, "input": "x", "dimensions": 128}),
            "dimensions",
            "384 dimensions",
        ),
        (
            json!({"model": m, "input": "x", "encoding_format": "int8"}),
            "encoding_format",
            "int8",
        ),
        (json!({"model": m, "input": ""}), "input", "empty"),
        (json!({"model": m, "input": []}), "input", "empty"),
        (json!({"model": m, "input": [999999]}), "input", "999999"),
        (
            json!({"model": m, "input": "x", "temperature": 1}),
            "temperature",
            "temperature",
        ),
        (
            json!({"model": m, "input": "x", "truncate_prompt_tokens": 0}),
            "truncate_prompt_tokens",
            "256",
        ),
        (
            json!({"model": m, "input": "x", "prompt_name": "query"}),
            "prompt_name",
            "no prompts",
        ),
    ] {
        let (s, v) = post(&server, "/v1/embeddings", body.clone()).await;
        assert_eq!(s, 400, "{body} -> {v}");
        assert_eq!(v["error"]["param"], param, "{body} -> {v}");
        assert!(message(&v).contains(needle), "{body} -> {v}");
    }
    let (s, v) = post(
        &server,
        "/v1/embeddings",
        json!({"model": "other", "input": "x"}),
    )
    .await;
    assert_eq!(s, 404, "{v}");

    // Too long: a 400 naming both numbers, unless truncate_prompt_tokens keeps the last ones.
    let long: Vec<u32> = std::iter::once(101)
        .chain(std::iter::repeat_n(7592, 300))
        .chain([102])
        .collect();
    let (s, v) = post(
        &server,
        "/v1/embeddings",
        json!({"model": m, "input": [long.clone()]}),
    )
    .await;
    assert_eq!(s, 400, "{v}");
    assert!(
        message(&v).contains("302") && message(&v).contains("256"),
        "{v}"
    );
    let (s, v_last) = post(
        &server,
        "/v1/embeddings",
        json!({"model": m, "input": [long.clone()], "truncate_prompt_tokens": 256}),
    )
    .await;
    assert_eq!(s, 200, "{v_last}");
    assert_eq!(v_last["usage"]["prompt_tokens"], 256);
    // TEI's /embed: 413 in its shape, unless `truncate` keeps the first tokens (or the last,
    // with `truncation_direction: Left`, as truncate_prompt_tokens did).
    let (s, v) = post(&server, "/embed", json!({"inputs": [long.clone()]})).await;
    assert_eq!(s, 413, "{v}");
    assert_eq!(v["error_type"], "validation", "{v}");
    assert!(v["error"].as_str().unwrap().contains("`truncate`"), "{v}");
    let (s, left) = post(
        &server,
        "/embed",
        json!({"inputs": [long.clone()], "truncate": true, "truncation_direction": "Left"}),
    )
    .await;
    assert_eq!(s, 200, "{left}");
    assert_eq!(left[0].as_array().unwrap().len(), 384);
    let last: Vec<f32> = serde_json::from_value(left[0].clone()).unwrap();
    assert_eq!(last, vector(&v_last, 0));

    // Generation endpoints refuse: this model serves embeddings.
    let (s, v) = post(
        &server,
        "/v1/completions",
        json!({"model": m, "prompt": "x"}),
    )
    .await;
    assert_eq!(s, 400, "{v}");
    assert!(message(&v).contains("embeddings"), "{v}");

    // Concurrent requests share forward passes.
    let passes_before = metric(&server, "pagoda:embedding_forward_passes_total").await;
    let inputs_before = metric(&server, "pagoda:embedding_inputs_total").await;
    let sentence = "The quick brown fox jumps over the lazy dog near the river bank today.";
    let requests = (0..24).map(|i| {
        let texts = vec![format!("{sentence} {i}"); 4];
        let body = json!({"model": m, "input": texts});
        let url = server.url("/v1/embeddings");
        async move {
            client()
                .post(url)
                .json(&body)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    });
    let statuses = futures_util::future::join_all(requests).await;
    assert!(statuses.iter().all(|&s| s == 200), "{statuses:?}");
    let passes = metric(&server, "pagoda:embedding_forward_passes_total").await - passes_before;
    let inputs = metric(&server, "pagoda:embedding_inputs_total").await - inputs_before;
    assert_eq!(inputs, 96.0);
    println!("24 concurrent requests ran in {passes} forward passes");
    assert!(
        passes < 24.0,
        "{passes} passes for 24 concurrent requests: none were batched"
    );

    // A long batch is cut into steps of --max-batch-tokens (512 here: two of its 250-token
    // inputs a step); a short query sent while it runs goes into the next step and is
    // answered while the batch still has steps to go.
    let doc = "The river rose through the night, and by morning the old stone bridge stood \
               alone in a wide brown lake. "
        .repeat(20);
    let passes_before = metric(&server, "pagoda:embedding_forward_passes_total").await;
    let long_body = json!({"model": m, "input": vec![doc; 16], "truncate_prompt_tokens": 250});
    let long_url = server.url("/v1/embeddings");
    let long = tokio::spawn(async move {
        let resp = client()
            .post(long_url)
            .json(&long_body)
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let v: Value = resp.json().await.unwrap();
        (status, v, std::time::Instant::now())
    });
    // Wait for its first step, so that the query finds the batch running.
    while metric(&server, "pagoda:embedding_forward_passes_total").await == passes_before {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let (s, short) = post(
        &server,
        "/v1/embeddings",
        json!({"model": m, "input": "hello world"}),
    )
    .await;
    let short_done = std::time::Instant::now();
    assert_eq!(s, 200, "{short}");
    assert_eq!(
        vector(&short, 0),
        hello,
        "run beside the batch, the same vector"
    );
    let (s, long, long_done) = long.await.unwrap();
    assert_eq!(s, 200, "{long}");
    assert_eq!(long["usage"]["prompt_tokens"], 16 * 250);
    assert!(
        short_done < long_done,
        "the short query waited for the whole batch"
    );

    // The official client.
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/openai_embeddings.py");
    let out = Command::new(python)
        .arg(script)
        .args(["--base-url", &server.url("/v1"), "--model", m])
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("no_proxy", "127.0.0.1,localhost")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "openai_embeddings.py: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    server.stop();
    server.join().unwrap();
}
