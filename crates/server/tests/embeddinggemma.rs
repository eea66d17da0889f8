//! `/v1/embeddings` on EmbeddingGemma-300M (fetched on demand, in-situ q8_0 as served by
//! default): `/v1/models`' task and length, Matryoshka `dimensions: 256` (the full vector cut
//! and re-normalised, matching sentences still closest), and a length it was not trained for
//! refused with the ones it was.
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
}
