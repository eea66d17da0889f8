//! What popular clients send, accepted (issue 35): unknown keys inside messages, content parts,
//! blocks, input items and tools ignored and counted on every API; unknown top-level parameters
//! refused with a near known name, or let through by `--unknown-fields`; litellm's own client
//! holding a conversation and a tool round trip; `/tokenize` with llama.cpp's fields; the
//! Messages API's temperature range. On the Qwen server `front_apis` shares.
#![allow(clippy::unwrap_used)]

use crate::common;
use crate::front_apis::{qwen, run_script_with};

use common::{TestServer, client, error_of, metrics_text, post};
use pagoda_server::{ServerConfig, UnknownFields};
use serde_json::{Value, json};

/// The sample of `pagoda:request_ignored_fields_total` for `field` (0 when absent).
async fn ignored_count(base: &str, field: &str) -> f64 {
    let text = metrics_text(&client(), base).await;
    let want = format!("field=\"{field}\"");
    text.lines()
        .find(|l| l.starts_with("pagoda:request_ignored_fields_total{") && l.contains(&want))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

const WEATHER: &str = "get_weather";

fn chat_tool() -> Value {
    json!({"type": "function", "x-client-id": 7, "function": {
        "name": WEATHER, "description": "Weather in a city", "x-ui-hint": "map",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}})
}

#[tokio::test]
async fn unknown_keys_inside_messages_parts_and_tools_are_ignored_on_every_api() {
    let s = qwen();
    let c = client();
    let field = "messages[].provider_specific_fields";
    let before = ignored_count(&s.base, field).await;
    // litellm 1.80's replay of an assistant turn, a text part with a cache hint, a tool with
    // a client's own keys.
    let chat = json!({"model": common::MODEL, "max_tokens": 2, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "Hi", "cache_control": {"type": "ephemeral"}}]},
        {"role": "assistant", "content": "Hello!", "provider_specific_fields": {"refusal": null},
         "function_call": null, "tool_calls": null},
        {"role": "user", "content": "Bye"}],
        "tools": [chat_tool()]});
    let (status, body) = post(&c, &s.url("/v1/chat/completions"), &chat).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(ignored_count(&s.base, field).await, before + 1.0);
    for f in [
        "messages[].content[].cache_control",
        "tools[].x-client-id",
        "tools[].function.x-ui-hint",
    ] {
        assert!(ignored_count(&s.base, f).await >= 1.0, "{f} not counted");
    }

    let messages = json!({"model": common::MODEL, "max_tokens": 2, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "Hi", "x-trace": 1}], "id": "m1"}],
        "tools": [{"name": WEATHER, "input_schema": {"type": "object"}, "x-client-id": 7}]});
    let (status, body) = post(&c, &s.url("/v1/messages"), &messages).await;
    assert_eq!(status, 200, "{body}");
    assert!(ignored_count(&s.base, "messages[].id").await >= 1.0);

    let responses = json!({"model": common::MODEL, "max_output_tokens": 2, "input": [
        {"type": "message", "role": "user", "content": "Hi", "x-trace": 1}]});
    let (status, body) = post(&c, &s.url("/v1/responses"), &responses).await;
    assert_eq!(status, 200, "{body}");
    assert!(ignored_count(&s.base, "input[].x-trace").await >= 1.0);
}

#[tokio::test]
async fn unknown_top_level_parameters_are_refused_naming_the_near_known_one() {
    let s = qwen();
    let c = client();
    let msg = json!([{"role": "user", "content": "Hi"}]);
    for (path, body, field, near) in [
        (
            "/v1/chat/completions",
            json!({"model": common::MODEL, "messages": msg, "temprature": 0.5}),
            "temprature",
            Some("temperature"),
        ),
        (
            "/v1/chat/completions",
            json!({"model": common::MODEL, "messages": msg, "max_token": 5}),
            "max_token",
            Some("max_tokens"),
        ),
        (
            "/v1/completions",
            json!({"model": common::MODEL, "prompt": "Hi", "frobnicate": 1}),
            "frobnicate",
            None,
        ),
        (
            "/v1/responses",
            json!({"model": common::MODEL, "input": "Hi", "max_output_token": 5}),
            "max_output_token",
            Some("max_output_tokens"),
        ),
        (
            "/v1/chat/completions",
            json!({"model": common::MODEL, "messages": msg,
                   "response_format": {"type": "json_schema", "json_schema": {"schema": {}, "strictt": true}}}),
            "response_format.json_schema.strictt",
            Some("strict"),
        ),
    ] {
        let (status, v) = post(&c, &s.url(path), &body).await;
        assert_eq!(status, 400, "{path} {body}: {v}");
        let e = error_of(&v);
        assert_eq!(e["param"], field, "{v}");
        assert_eq!(e["code"], "unknown_parameter", "{v}");
        let message = e["message"].as_str().unwrap();
        match near {
            Some(n) => assert!(
                message.ends_with(&format!("did you mean `{n}`?")),
                "{message}"
            ),
            None => assert!(!message.contains("did you mean"), "{message}"),
        }
    }
    // Anthropic's error shape, the same rule.
    let body = json!({"model": common::MODEL, "max_tokens": 2, "messages": msg, "temprature": 0.5});
    let (status, v) = post(&c, &s.url("/v1/messages"), &body).await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["type"], "error", "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains("did you mean `temperature`?"), "{message}");
    // Known fields keep their checks.
    let body = json!({"model": common::MODEL, "messages": msg, "temperature": 3});
    let (status, v) = post(&c, &s.url("/v1/chat/completions"), &body).await;
    assert_eq!(
        (status, error_of(&v)["param"].clone()),
        (400, json!("temperature"))
    );
}

#[tokio::test]
async fn unknown_fields_ignore_lets_top_level_parameters_through_and_counts_them() {
    for policy in [UnknownFields::Ignore, UnknownFields::Warn] {
        let s = TestServer::start(
            common::small_setup(),
            ServerConfig {
                unknown_fields: policy,
                ..common::config()
            },
        );
        let c = client();
        let body = json!({"model": common::MODEL, "max_tokens": 2, "frobnicate": 1,
                          "messages": [{"role": "user", "content": "Hi"}]});
        let (status, v) = post(&c, &s.url("/v1/chat/completions"), &body).await;
        assert_eq!(status, 200, "{policy:?}: {v}");
        assert_eq!(ignored_count(&s.base, "frobnicate").await, 1.0);
        // Inside a parameter object an unknown key still changes the request: refused.
        let body = json!({"model": common::MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}],
                          "response_format": {"type": "json_object", "shema": {}}});
        let (status, v) = post(&c, &s.url("/v1/chat/completions"), &body).await;
        assert_eq!(status, 400, "{v}");
        s.stop();
        s.join().unwrap();
    }
}

/// litellm's own client (not an imitation of its request): a two-turn conversation that
/// replays its assistant message, and a tool round trip.
#[test]
fn litellm_conversation_and_tool_round_trip() {
    // litellm needs openai>=2 while the other scripts pin openai 1.x: it has its own
    // virtualenv, made by scripts/test.sh.
    let python = std::env::var("LITELLM_PYTHON").unwrap_or_else(|_| {
        let home = std::env::var("HOME").unwrap_or_default();
        format!("{home}/.cache/pagoda/litellm-venv/bin/python")
    });
    run_script_with(
        &python,
        "litellm_client.py",
        "litellm",
        &["--base-url", &qwen().url("/v1"), "--model", common::MODEL],
    );
}
