//! `--model DIR`: the server loads a Hugging Face checkpoint directory (a tiny random llama
//! written by testkit's hf_checkpoint), converting and quantizing it at load, and serves it.
#![allow(clippy::unwrap_used)]

use crate::common;

use common::{TestServer, client, config, small_setup};
use pagoda_testkit::hf_checkpoint;
use pagoda_testkit::tiny_model::TinyModel;
use serde_json::{Value, json};

#[tokio::test]
async fn a_checkpoint_directory_serves_completions() {
    let dir = std::env::temp_dir().join(format!("pagoda-server-hf-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    hf_checkpoint::write(&TinyModel::llama(), &dir, 2).unwrap();
    let server = TestServer::start_model(dir.clone(), small_setup(), config());
    let body = json!({
        "model": common::MODEL,
        "prompt": [5, 17, 29, 41],
        "max_tokens": 5,
        "temperature": 0,
        "ignore_eos": true,
    });
    let mut texts = Vec::new();
    for _ in 0..2 {
        let resp = client()
            .post(server.url("/v1/completions"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let v: Value = resp.json().await.unwrap();
        assert_eq!(v["usage"]["completion_tokens"], 5, "{v}");
        assert_eq!(v["usage"]["prompt_tokens"], 4, "{v}");
        texts.push(v["choices"][0]["text"].as_str().unwrap().to_owned());
    }
    assert_eq!(texts[0], texts[1], "greedy answers repeat");
    server.stop();
    server.join().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}
