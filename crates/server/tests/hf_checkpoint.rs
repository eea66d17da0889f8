//! `--model DIR`: the server loads a Hugging Face checkpoint directory (a tiny random llama
//! written by testkit's hf_checkpoint), converting and quantizing it at load, and serves it.
#![allow(clippy::unwrap_used)]

use crate::common;

use common::{TestServer, client, config, small_setup};
use pagoda_server::ServerConfig;
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

async fn models_of(server: &TestServer) -> Value {
    let res = client().get(server.url("/v1/models")).send().await.unwrap();
    res.json().await.unwrap()
}

/// The Responses API's `temperature`/`top_p`, which echo what the request sampled with.
async fn responses_echo(server: &TestServer, extra: Value) -> (f64, f64) {
    // Control bytes: byte-level tokens of the tiny vocabulary (U+0104.. stand for bytes 4..).
    let input = "\u{4}\u{5}\u{6}";
    let mut body = json!({"model": common::MODEL, "input": input, "max_output_tokens": 2});
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    let (status, v) = common::post(&client(), &server.url("/v1/responses"), &body).await;
    assert_eq!(status, 200, "{v}");
    (
        v["temperature"].as_f64().unwrap(),
        v["top_p"].as_f64().unwrap(),
    )
}

#[tokio::test]
async fn a_directorys_generation_config_gives_the_sampling_defaults() {
    let dir = std::env::temp_dir().join(format!("pagoda-server-gencfg-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    hf_checkpoint::write(&TinyModel::llama(), &dir, 1).unwrap();
    std::fs::write(
        dir.join("generation_config.json"),
        r#"{"bos_token_id": 1, "do_sample": true, "temperature": 0.5, "top_p": 0.75, "top_k": 7}"#,
    )
    .unwrap();

    // auto (the default): the file's values, listed with their source.
    let server = TestServer::start_model(dir.clone(), small_setup(), config());
    let models = models_of(&server).await;
    let d = &models["data"][0]["sampling_defaults"];
    assert_eq!(d["temperature"], 0.5, "{models}");
    assert_eq!(d["top_k"], 7, "{models}");
    let source = format!("file:{}", dir.join("generation_config.json").display());
    assert_eq!(d["source"], source.as_str(), "{models}");
    assert_eq!(responses_echo(&server, json!({})).await, (0.5, 0.75));
    // A request's own value wins, field by field.
    assert_eq!(
        responses_echo(&server, json!({"temperature": 0.2})).await,
        (0.2, 0.75)
    );
    server.stop();
    server.join().unwrap();

    // none: today's defaults, whatever the model recommends.
    let none = ServerConfig {
        generation_config: "none".parse().unwrap(),
        ..config()
    };
    let server = TestServer::start_model(dir.clone(), small_setup(), none);
    let models = models_of(&server).await;
    assert_eq!(
        models["data"][0]["sampling_defaults"],
        json!({"source": "none"})
    );
    assert_eq!(responses_echo(&server, json!({})).await, (1.0, 1.0));
    server.stop();
    server.join().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}
