//! What a hostile (or just broken) client finds: a wrong method or an unknown path answers the
//! OpenAI error body, never an empty one, with or without an API key.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::OnceLock;

use common::{TestServer, client, error_of};
use pagoda_server::ServerConfig;
use serde_json::Value;

fn server() -> &'static TestServer {
    static S: OnceLock<TestServer> = OnceLock::new();
    S.get_or_init(|| TestServer::start(common::small_setup(), common::config()))
}

/// A model-less server behind an API key: routing and auth need no model.
fn keyed() -> &'static TestServer {
    static S: OnceLock<TestServer> = OnceLock::new();
    S.get_or_init(|| {
        TestServer::start_unloaded(ServerConfig {
            api_key: Some("sk-right".into()),
            ..common::config()
        })
    })
}

// ---- 405 and 404 -------------------------------------------------------------------------

/// Sends `method path` and checks the answer is `status` with the OpenAI error body.
async fn expect_json_error(
    c: &reqwest::Client,
    s: &TestServer,
    method: reqwest::Method,
    path: &str,
    status: u16,
) -> reqwest::header::HeaderMap {
    let res = c.request(method.clone(), s.url(path)).send().await.unwrap();
    assert_eq!(res.status(), status, "{method} {path}");
    let headers = res.headers().clone();
    assert_eq!(
        headers["content-type"], "application/json",
        "{method} {path}"
    );
    let text = res.text().await.unwrap();
    let v: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{method} {path}: not JSON ({e}): {text:?}"));
    error_of(&v);
    headers
}

#[tokio::test]
async fn wrong_method_and_unknown_path_answer_the_openai_error_body() {
    let s = server();
    let c = client();
    use reqwest::Method;
    for (method, path, allow) in [
        (Method::GET, "/v1/chat/completions", "POST"),
        (Method::GET, "/v1/completions", "POST"),
        (Method::DELETE, "/v1/models", "GET"),
        (Method::PUT, "/tokenize", "POST"),
        (Method::POST, "/health", "GET"),
        (Method::POST, "/metrics", "GET"),
    ] {
        let headers = expect_json_error(&c, s, method.clone(), path, 405).await;
        let allowed = headers["allow"].to_str().unwrap();
        assert!(allowed.contains(allow), "{method} {path}: Allow {allowed}");
    }
    expect_json_error(&c, s, Method::GET, "/v1/nothing-here", 404).await;
    expect_json_error(&c, s, Method::DELETE, "/v2/chat/completions", 404).await;
}

/// Behind the API key the key is checked first, as before: a wrong method without the key is a
/// 401, with it a 405; both JSON. Unknown paths and the open routes answer without a key.
#[tokio::test]
async fn wrong_method_behind_the_api_key_is_json_too() {
    let s = keyed();
    let c = client();
    use reqwest::Method;
    for (method, path) in [
        (Method::GET, "/v1/chat/completions"),
        (Method::DELETE, "/v1/models"),
    ] {
        expect_json_error(&c, s, method.clone(), path, 401).await;
        let res = c
            .request(method.clone(), s.url(path))
            .bearer_auth("sk-right")
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 405, "{method} {path}");
        assert!(res.headers().contains_key("allow"), "{method} {path}");
        error_of(&res.json::<Value>().await.unwrap());
    }
    expect_json_error(&c, s, Method::POST, "/health", 405).await;
    expect_json_error(&c, s, Method::GET, "/v1/nothing-here", 404).await;
}
