//! `/v1/rerank`, `/v1/score` and their aliases (`/rerank` in Cohere's and TEI's shapes,
//! `/score`): on all-MiniLM-L6-v2 (a bi-encoder, fetched on demand) the scores are the cosine
//! of an independent numpy forward pass's embeddings (model crate's tests/bert_reference.py)
//! for a dozen documents, most relevant first; on a tiny random cross-encoder the testkit
//! writes, the sigmoid of the numpy logits. Every refusal is a 400 in the API's error shape;
//! on a generation model (the binary's shared Qwen server) and for embeddings on a
//! cross-encoder, a 400 naming the model and the task.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::path::{Path, PathBuf};

use common::{TestServer, client, config, error_of, small_setup};
use pagoda_frontend::HfTokenizer;
use pagoda_server::ServerConfig;
use pagoda_testkit::tiny_cross_encoder::{DOCUMENTS, QUERY};
use serde_json::{Value, json};

fn minilm() -> PathBuf {
    common::fetched_dir("minilm", "all-MiniLM-L6-v2")
}

/// bert_reference.py's output for `input` (token-id lists, or pairs `{"ids", "second"}`).
fn numpy(dir: &Path, input: &Value) -> Vec<Vec<f64>> {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../model/tests/bert_reference.py");
    let out = pagoda_testkit::python_reference::python_reference(&script, dir, input);
    serde_json::from_value(out).unwrap()
}

/// A server for the encoder at `dir`, in f32.
fn start(dir: PathBuf) -> TestServer {
    let config = ServerConfig {
        quantization: pagoda_hf::Quantization::None,
        ..config()
    };
    TestServer::start_model(dir, small_setup(), config)
}

fn cosine(a: &[f64], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let n = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
    dot / (n(a) * n(b))
}

async fn post(server: &TestServer, path: &str, body: Value) -> (u16, Value) {
    common::post(&client(), &server.url(path), &body).await
}

/// Checks a rerank answer against `want` (one reference score per document): every score
/// within `tol`, results most relevant first, each index once; prints the worst error.
fn check_ranking(what: &str, v: &Value, want: &[f64], tol: f64) {
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), want.len(), "{v}");
    let mut prev = f64::INFINITY;
    let mut seen = vec![false; want.len()];
    let mut worst = 0f64;
    for r in results {
        let i = r["index"].as_u64().unwrap() as usize;
        let got = r["relevance_score"].as_f64().unwrap();
        worst = worst.max((got - want[i]).abs());
        assert!(
            (got - want[i]).abs() < tol,
            "document {i}: {got} vs reference {}",
            want[i]
        );
        assert!(got <= prev, "not most relevant first: {v}");
        prev = got;
        assert!(!std::mem::replace(&mut seen[i], true), "index {i} twice");
    }
    println!(
        "{what}: worst score error {worst:e} over {} documents",
        want.len()
    );
}

/// The 400 of `body` on `path`: its `param` and a piece of its message.
async fn refused(server: &TestServer, path: &str, body: Value, param: &str, needle: &str) {
    let (s, v) = post(server, path, body.clone()).await;
    assert_eq!(s, 400, "{path} {body} -> {v}");
    let e = error_of(&v);
    assert_eq!(e["param"], param, "{path} {body} -> {v}");
    let msg = e["message"].as_str().unwrap();
    assert!(msg.contains(needle), "{path} {body} -> {v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rerank_and_score_on_a_bi_encoder() {
    let dir = minilm();
    let server = start(dir.clone());
    let m = common::MODEL;
    let tok = HfTokenizer::from_file(&dir.join("tokenizer.json")).unwrap();
    let mut ids = vec![tok.encode(QUERY).unwrap()];
    ids.extend(DOCUMENTS.iter().map(|d| tok.encode(d).unwrap()));
    let tokens: usize = ids.iter().map(Vec::len).sum();
    let reference = numpy(&dir, &json!(ids));
    let want: Vec<f64> = reference[1..]
        .iter()
        .map(|d| cosine(&reference[0], d))
        .collect();

    let (s, v) = post(
        &server,
        "/v1/rerank",
        json!({"model": m, "query": QUERY, "documents": DOCUMENTS}),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    assert!(v["id"].as_str().unwrap().starts_with("rerank-"), "{v}");
    assert_eq!(v["model"], m);
    assert_eq!(v["usage"]["total_tokens"], tokens, "{v}");
    check_ranking("bi-encoder", &v, &want, 1e-4);
    let top = v["results"][0]["index"].as_u64().unwrap() as usize;
    assert_eq!(v["results"][0]["document"]["text"], DOCUMENTS[top], "{v}");
    assert!(
        DOCUMENTS[top].contains("assword"),
        "a password document first: {v}"
    );
    println!("bi-encoder rerank: top {top} ({})", DOCUMENTS[top]);

    // Cohere's document objects, top_n, no documents echoed; /v2/rerank and /rerank alike.
    let objects: Vec<Value> = DOCUMENTS.iter().map(|d| json!({"text": d})).collect();
    for path in ["/v2/rerank", "/rerank"] {
        let body = json!({"model": m, "query": QUERY, "documents": objects, "top_n": 3,
                          "return_documents": false});
        let (s, top3) = post(&server, path, body).await;
        assert_eq!(s, 200, "{path}: {top3}");
        assert_eq!(top3["results"].as_array().unwrap().len(), 3, "{top3}");
        assert_eq!(top3["results"][0]["index"], v["results"][0]["index"]);
        assert!(top3["results"][0].get("document").is_none(), "{top3}");
    }

    // /v1/score: 1:N gives the same scores in document order; N:N pairs in order; /score.
    let (s, sc) = post(
        &server,
        "/v1/score",
        json!({"model": m, "text_1": QUERY, "text_2": DOCUMENTS}),
    )
    .await;
    assert_eq!(s, 200, "{sc}");
    assert_eq!(sc["object"], "list");
    assert!(sc["id"].as_str().unwrap().starts_with("score-"), "{sc}");
    assert!(sc["created"].as_u64().unwrap() > 0);
    for (i, d) in sc["data"].as_array().unwrap().iter().enumerate() {
        assert_eq!(d["index"], i);
        assert_eq!(d["object"], "score");
        assert!((d["score"].as_f64().unwrap() - want[i]).abs() < 1e-4, "{d}");
    }
    let (s, nn) = post(
        &server,
        "/score",
        json!({"model": m, "text_1": [QUERY, DOCUMENTS[1]], "text_2": [DOCUMENTS[0], DOCUMENTS[1]]}),
    )
    .await;
    assert_eq!(s, 200, "{nn}");
    assert!((nn["data"][0]["score"].as_f64().unwrap() - want[0]).abs() < 1e-4);
    assert!(
        (nn["data"][1]["score"].as_f64().unwrap() - 1.0).abs() < 1e-4,
        "{nn}"
    );

    // TEI's /rerank: [{"index", "score", "text"}], most relevant first.
    let (s, tei) = post(
        &server,
        "/rerank",
        json!({"query": QUERY, "texts": DOCUMENTS, "return_text": true}),
    )
    .await;
    assert_eq!(s, 200, "{tei}");
    let first = &tei[0];
    assert_eq!(first["index"], v["results"][0]["index"], "{tei}");
    assert_eq!(first["text"], DOCUMENTS[top]);
    assert!((first["score"].as_f64().unwrap() - want[top]).abs() < 1e-4);

    // Refusals: a 400 naming the field.
    let long = "password ".repeat(300);
    for (path, body, param, needle) in [
        (
            "/v1/rerank",
            json!({"model": m, "query": QUERY, "documents": []}),
            "documents",
            "empty",
        ),
        (
            "/v1/rerank",
            json!({"model": m, "query": "", "documents": ["a"]}),
            "query",
            "empty",
        ),
        (
            "/v1/rerank",
            json!({"model": m, "query": QUERY, "documents": ["a", ""]}),
            "documents",
            "empty",
        ),
        (
            "/v1/rerank",
            json!({"model": m, "documents": ["a"]}),
            "query",
            "query",
        ),
        (
            "/v1/rerank",
            json!({"model": m, "query": QUERY, "documents": ["a"], "top_n": 0}),
            "top_n",
            "positive",
        ),
        (
            "/v1/rerank",
            json!({"model": m, "query": QUERY, "documents": ["a"], "top_n": -2}),
            "top_n",
            "positive",
        ),
        (
            "/v1/rerank",
            json!({"model": m, "query": QUERY, "documents": ["a", long]}),
            "documents",
            "256",
        ),
        (
            "/v1/rerank",
            json!({"model": m, "query": QUERY, "documents": ["a"], "top_k": 1}),
            "top_k",
            "top_k",
        ),
        (
            "/v1/score",
            json!({"model": m, "text_1": ["a", "b", "c"], "text_2": ["a", "b"]}),
            "text_2",
            "3 texts",
        ),
        (
            "/v1/score",
            json!({"model": m, "text_1": [], "text_2": "a"}),
            "text_1",
            "empty",
        ),
        (
            "/v1/score",
            json!({"model": m, "text_1": "a", "text_2": "a", "truncate_prompt_tokens": 0}),
            "truncate_prompt_tokens",
            "256",
        ),
    ] {
        refused(&server, path, body, param, needle).await;
    }
    // Cut instead: the long document's last 256 tokens.
    let (s, cut) = post(
        &server,
        "/v1/rerank",
        json!({"model": m, "query": QUERY, "documents": [long], "truncate_prompt_tokens": 256}),
    )
    .await;
    assert_eq!(s, 200, "{cut}");
    assert_eq!(cut["usage"]["total_tokens"], ids[0].len() + 256, "{cut}");
    let (s, v) = post(
        &server,
        "/v1/rerank",
        json!({"model": "other", "query": QUERY, "documents": ["a"]}),
    )
    .await;
    assert_eq!(s, 404, "{v}");
    // TEI's shape for TEI's route.
    let (s, v) = post(&server, "/rerank", json!({"query": QUERY, "texts": []})).await;
    assert_eq!(s, 400, "{v}");
    assert_eq!(v["error_type"], "empty", "{v}");
    server.stop();
    server.join().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rerank_and_score_on_a_cross_encoder() {
    let tokenizer = minilm().join("tokenizer.json");
    let dir = std::env::temp_dir().join(format!("pagoda-server-rerank-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    pagoda_testkit::tiny_cross_encoder::write(&dir, &tokenizer, 30522, 11).unwrap();
    let server = start(dir.clone());
    let m = common::MODEL;
    let tok = HfTokenizer::from_file(&tokenizer).unwrap();
    // The reference's pairs are built here from single-text tokenizations: [CLS] query [SEP]
    // then the document's tokens without its [CLS], of type 1.
    let q = tok.encode(QUERY).unwrap();
    let pairs: Vec<Value> = DOCUMENTS
        .iter()
        .map(|d| {
            let mut ids = q.clone();
            ids.extend(&tok.encode(d).unwrap()[1..]);
            json!({"ids": ids, "second": q.len()})
        })
        .collect();
    let logits: Vec<f64> = numpy(&dir, &json!(pairs)).iter().map(|l| l[0]).collect();
    let want: Vec<f64> = logits.iter().map(|&l| 1.0 / (1.0 + (-l).exp())).collect();

    let models: Value = client()
        .get(server.url("/v1/models"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(models["data"][0]["task"], "score", "{models}");
    let (s, v) = post(
        &server,
        "/v1/rerank",
        json!({"model": m, "query": QUERY, "documents": DOCUMENTS}),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    check_ranking("cross-encoder", &v, &want, 1e-5);
    let (s, sc) = post(
        &server,
        "/v1/score",
        json!({"model": m, "text_1": [QUERY, QUERY], "text_2": [DOCUMENTS[3], DOCUMENTS[4]]}),
    )
    .await;
    assert_eq!(s, 200, "{sc}");
    for (k, i) in [3, 4].into_iter().enumerate() {
        let got = sc["data"][k]["score"].as_f64().unwrap();
        assert!((got - want[i]).abs() < 1e-5, "{sc}");
    }
    // TEI's raw_scores: the logits themselves.
    let (s, tei) = post(
        &server,
        "/rerank",
        json!({"query": QUERY, "texts": DOCUMENTS, "raw_scores": true}),
    )
    .await;
    assert_eq!(s, 200, "{tei}");
    for r in tei.as_array().unwrap() {
        let i = r["index"].as_u64().unwrap() as usize;
        assert!(
            (r["score"].as_f64().unwrap() - logits[i]).abs() < 1e-4,
            "{r}"
        );
    }

    // The model has 64 positions: a longer pair is refused, or cut from the document's end.
    let long = "password ".repeat(80);
    refused(
        &server,
        "/v1/rerank",
        json!({"model": m, "query": QUERY, "documents": ["a", long]}),
        "documents",
        "64",
    )
    .await;
    let (s, cut) = post(
        &server,
        "/v1/rerank",
        json!({"model": m, "query": QUERY, "documents": [long], "truncate_prompt_tokens": -1}),
    )
    .await;
    assert_eq!(s, 200, "{cut}");
    assert_eq!(cut["usage"]["total_tokens"], 64, "{cut}");

    // No embeddings from a cross-encoder: a 400 naming the model and what it serves.
    let (s, v) = post(&server, "/v1/embeddings", json!({"model": m, "input": "x"})).await;
    assert_eq!(s, 400, "{v}");
    let msg = error_of(&v)["message"].as_str().unwrap().to_owned();
    assert!(msg.contains(m) && msg.contains("/v1/rerank"), "{v}");
    let (s, v) = post(
        &server,
        "/v1/completions",
        json!({"model": m, "prompt": "x"}),
    )
    .await;
    assert_eq!(s, 400, "{v}");
    let msg = error_of(&v)["message"].as_str().unwrap().to_owned();
    assert!(
        msg.contains(m) && msg.contains("scores of text pairs"),
        "{v}"
    );
    let (s, v) = post(&server, "/embed", json!({"inputs": "x"})).await;
    assert!(s == 400 || s == 413, "{s} {v}");
    assert!(v["error"].as_str().unwrap().contains("embeddings"), "{v}");
    server.stop();
    server.join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn rerank_on_a_generation_model_is_refused() {
    let server = crate::front_apis::qwen();
    for (path, body) in [
        (
            "/v1/rerank",
            json!({"model": common::MODEL, "query": "q", "documents": ["a"]}),
        ),
        (
            "/v1/score",
            json!({"model": common::MODEL, "text_1": "q", "text_2": "a"}),
        ),
    ] {
        let (s, v) = post(server, path, body).await;
        assert_eq!(s, 400, "{v}");
        let msg = error_of(&v)["message"].as_str().unwrap().to_owned();
        assert!(
            msg.contains(common::MODEL)
                && msg.contains("text generation")
                && msg.contains("scores of text pairs"),
            "{v}"
        );
    }
}
