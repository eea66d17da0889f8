//! `/v1/embeddings` on EmbeddingGemma-300M (fetched on demand, in-situ q8_0 as served by
//! default): `/v1/models`' task and length, Matryoshka `dimensions: 256` (the full vector cut
//! and re-normalised, matching sentences still closest), and a length it was not trained for
//! refused with the ones it was; sentence-transformers' prompts by `prompt_name`, and the
//! `query` and `document` ones under `/v1/score`; TEI's `/embed` (the same vectors,
//! `normalize: false`, its error shape and statuses).
#![allow(clippy::unwrap_used)]

use crate::common;

use std::path::PathBuf;

use common::{TestServer, client, config, small_setup};
use serde_json::{Value, json};

fn embeddinggemma() -> PathBuf {
    common::fetched_dir("embeddinggemma", "embeddinggemma-300m")
}

async fn post(server: &TestServer, body: Value) -> (u16, Value) {
    let resp = client()
        .post(server.url("/v1/embeddings"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap())
}

fn vectors(v: &Value) -> Vec<Vec<f32>> {
    v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            d["embedding"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32)
                .collect()
        })
        .collect()
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn matryoshka_dimensions() {
    let server = TestServer::start_model(embeddinggemma(), small_setup(), config());
    let m = common::MODEL;
    let models: Value = client()
        .get(server.url("/v1/models"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(models["data"][0]["task"], "embed", "{models}");
    assert_eq!(models["data"][0]["max_model_len"], 2048, "{models}");

    let input = [
        "How do I reset my password?",
        "I forgot my password and cannot log in.",
        "Photosynthesis converts light energy into chemical energy.",
    ];
    let (s, full) = post(&server, json!({"model": m, "input": input})).await;
    assert_eq!(s, 200, "{full}");
    let full = vectors(&full);
    assert_eq!(full[0].len(), 768);

    let (s, cut) = post(
        &server,
        json!({"model": m, "input": input, "dimensions": 256}),
    )
    .await;
    assert_eq!(s, 200, "{cut}");
    let cut = vectors(&cut);
    for (c, f) in cut.iter().zip(&full) {
        assert_eq!(c.len(), 256);
        let norm = dot(c, c).sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "norm {norm}");
        // The first 256 values of the full vector, re-normalised.
        let head = &f[..256];
        let scale = dot(head, head).sqrt();
        for (a, b) in c.iter().zip(head) {
            assert!((a - b / scale).abs() < 1e-6, "{a} vs {}", b / scale);
        }
    }
    assert!(
        dot(&cut[0], &cut[1]) > dot(&cut[0], &cut[2]) + 0.1,
        "password pair {} vs photosynthesis {}",
        dot(&cut[0], &cut[1]),
        dot(&cut[0], &cut[2])
    );

    let (s, body) = post(
        &server,
        json!({"model": m, "input": "x", "dimensions": 100}),
    )
    .await;
    assert_eq!(s, 400, "{body}");
    let msg = body["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("[768, 512, 256, 128]"), "{msg}");

    // sentence-transformers' prompts, carried from config_sentence_transformers.json: the
    // `query` prompt is its text put before the input.
    let text = "How do I reset my password?";
    let (s, named) = post(
        &server,
        json!({"model": m, "input": text, "prompt_name": "query"}),
    )
    .await;
    assert_eq!(s, 200, "{named}");
    let (s, spelled) = post(
        &server,
        json!({"model": m, "input": format!("task: search result | query: {text}")}),
    )
    .await;
    assert_eq!(s, 200, "{spelled}");
    assert_eq!(vectors(&named), vectors(&spelled));
    assert_ne!(vectors(&named)[0], full[0], "the prompt changed nothing");
    let (s, body) = post(
        &server,
        json!({"model": m, "input": text, "prompt_name": "questions"}),
    )
    .await;
    assert_eq!(s, 400, "{body}");
    assert_eq!(body["error"]["param"], "prompt_name", "{body}");
    let msg = body["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("query") && msg.contains("document"), "{msg}");

    // /v1/score embeds its first texts with the `query` prompt and its second ones with the
    // `document` prompt: the score is the cosine of those two vectors, not of the bare texts.
    let (s, doc) = post(
        &server,
        json!({"model": m, "input": input[1], "prompt_name": "document"}),
    )
    .await;
    assert_eq!(s, 200, "{doc}");
    let resp = client()
        .post(server.url("/v1/score"))
        .json(&json!({"model": m, "text_1": text, "text_2": input[1]}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let score: Value = resp.json().await.unwrap();
    let score = score["data"][0]["score"].as_f64().unwrap() as f32;
    let want = dot(&vectors(&named)[0], &vectors(&doc)[0]);
    assert!((score - want).abs() < 1e-5, "score {score} vs {want}");
    assert!(
        (score - dot(&full[0], &full[1])).abs() > 1e-3,
        "the prompts changed nothing"
    );

    // TEI's /embed: an array of arrays, the same vectors as /v1/embeddings (both normalise),
    // prompt_name and dimensions through the same rules.
    let srv = &server;
    let tei = |body: Value| async move {
        let resp = client()
            .post(srv.url("/embed"))
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        (status, resp.json::<Value>().await.unwrap())
    };
    let floats = |v: &Value| -> Vec<Vec<f32>> { serde_json::from_value(v.clone()).unwrap() };
    let (s, one) = tei(json!({"inputs": input[0]})).await;
    assert_eq!(s, 200, "{one}");
    assert_eq!(floats(&one), [full[0].clone()]);
    let (s, named_tei) = tei(json!({"inputs": [text], "prompt_name": "query"})).await;
    assert_eq!(s, 200, "{named_tei}");
    assert_eq!(floats(&named_tei), vectors(&named));
    let (s, cut_tei) = tei(json!({"inputs": input, "dimensions": 256})).await;
    assert_eq!(s, 200, "{cut_tei}");
    assert_eq!(floats(&cut_tei), cut);
    // normalize: false gives the model's vector before its Normalize module.
    let (s, raw) = tei(json!({"inputs": input[0], "normalize": false})).await;
    assert_eq!(s, 200, "{raw}");
    let raw = &floats(&raw)[0];
    let norm = dot(raw, raw).sqrt();
    assert!((norm - 1.0).abs() > 1e-3, "norm {norm}");
    for (a, b) in raw.iter().zip(&full[0]) {
        assert!((a / norm - b).abs() < 1e-6);
    }
    // Errors in TEI's shape and statuses.
    for (body, status, kind) in [
        (json!({"inputs": ""}), 400, "empty"),
        (json!({"inputs": "x", "dimensions": 100}), 413, "validation"),
        (
            json!({"inputs": "x", "prompt_name": "questions"}),
            413,
            "validation",
        ),
        (json!({"inputs": 5}), 422, "validation"),
    ] {
        let (s, v) = tei(body.clone()).await;
        assert_eq!(s, status, "{body} -> {v}");
        assert_eq!(v["error_type"], kind, "{body} -> {v}");
        assert!(v["error"].is_string(), "{body} -> {v}");
    }
}
