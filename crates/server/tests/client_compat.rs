//! What popular clients send, accepted (issue 35): unknown keys inside messages, content parts,
//! blocks, input items and tools ignored and counted on every API; unknown top-level parameters
//! refused with a near known name, or let through by `--unknown-fields`; litellm's own client
//! holding a conversation and a tool round trip; a max_tokens cut inside a character; two
//! streamed calls; Anthropic structured outputs and strict tools through the `anthropic` SDK;
//! the Messages API's temperature range. On the Qwen server `front_apis` shares.
#![allow(clippy::unwrap_used)]

use crate::common;
use crate::front_apis::{qwen, run_script_with};

use common::{TestServer, chunks, client, error_of, metrics_text, post, post_stream};
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
    // Anthropic's temperature range is [0, 1].
    let body =
        json!({"model": common::MODEL, "max_tokens": 1, "messages": msg, "temperature": 1.5});
    let (status, v) = post(&c, &s.url("/v1/messages"), &body).await;
    assert_eq!(status, 400, "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("[0, 1]"),
        "{v}"
    );
    let body =
        json!({"model": common::MODEL, "max_tokens": 1, "messages": msg, "temperature": 1.0});
    assert_eq!(post(&c, &s.url("/v1/messages"), &body).await.0, 200);
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

/// A completion cut by `max_tokens` inside a character (Qwen's tokens split these emoji):
/// no U+FFFD, and the joined stream is the non-streamed text, at every cut from 1 to 16 tokens.
#[tokio::test]
async fn max_tokens_inside_a_character_leaves_no_replacement_character() {
    let s = qwen();
    let c = client();
    // A regex forces the characters (the model left alone writes other things); it constrains
    // bytes, so tokens may still end inside a character.
    let body = |k: u32, stream: bool| {
        json!({"model": common::MODEL, "max_tokens": k, "temperature": 0, "stream": stream,
               "prompt": "Emoji:", "structured_outputs": {"regex": "( 👨‍👩‍👧‍👦🇫🇷👍🏽🏳️‍🌈日本語𝄞){3}"}})
    };
    let url = s.url("/v1/completions");
    let runs = (1..=16u32).map(|k| {
        let (c, url) = (c.clone(), url.clone());
        async move {
            let (st, whole) = post(&c, &url, &body(k, false)).await;
            assert_eq!(st, 200, "{whole}");
            let (st, events) = post_stream(&c, &url, &body(k, true)).await;
            assert_eq!(st, 200);
            let streamed: String = chunks(&events)
                .iter()
                .filter_map(|ch| ch["choices"][0]["text"].as_str())
                .collect();
            let text = whole["choices"][0]["text"].as_str().unwrap().to_owned();
            (
                k,
                text,
                streamed,
                whole["choices"][0]["finish_reason"].clone(),
            )
        }
    });
    let results = futures_util::future::join_all(runs).await;
    let mut held = 0;
    for (i, (k, text, streamed, finish)) in results.iter().enumerate() {
        assert!(!text.contains('\u{FFFD}'), "max_tokens {k}: {text:?}");
        assert_eq!(streamed, text, "max_tokens {k}: stream != text");
        if finish == "length" && i > 0 && results[i - 1].1 == *text {
            held += 1;
        }
    }
    // The test is only worth its time if some cut fell inside a character: one more token,
    // the same text.
    assert!(held > 0, "no cut inside a character: {results:?}");
}

/// Two calls in one reply, streamed: each starts with a chunk carrying its index, id, type, name
/// and empty arguments, then argument fragments by index; joined per index they are the
/// non-streamed calls' arguments byte for byte. A regex forces the model to write both calls
/// in Qwen's tagged syntax (left alone, Qwen2.5-Coder makes one call; docs/tool-calling.md).
#[tokio::test]
async fn two_streamed_calls_join_to_the_non_streamed_arguments() {
    let s = qwen();
    let c = client();
    let time = json!({"type": "function", "function": {"name": "get_time",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}});
    let regex = r#"<tool_call>\n\{"name": "get_weather", "arguments": \{"city": "Paris", "unit": "celsius", "days": \[1, 2, 3\]\}\}\n</tool_call>\n<tool_call>\n\{"name": "get_time", "arguments": \{"city": "Tokyo, Japan"\}\}\n</tool_call>"#;
    let body = |stream: bool| {
        json!({"model": common::MODEL, "max_tokens": 120, "temperature": 0, "stream": stream,
               "messages": [{"role": "user", "content": "Weather in Paris and time in Tokyo?"}],
               "tools": [chat_tool(), time], "tool_choice": "auto",
               "structured_outputs": {"regex": regex}})
    };
    let url = s.url("/v1/chat/completions");
    // Both at once: greedy outputs do not depend on the batch, and the two share one decode.
    let (plain, streamed) = (body(false), body(true));
    let ((st, whole), (stream_status, events)) =
        tokio::join!(post(&c, &url, &plain), post_stream(&c, &url, &streamed));
    assert_eq!(st, 200, "{whole}");
    assert_eq!(
        whole["choices"][0]["finish_reason"], "tool_calls",
        "{whole}"
    );
    let want: Vec<(String, String, String)> = whole["choices"][0]["message"]["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let f = &t["function"];
            let (name, args) = (
                f["name"].as_str().unwrap(),
                f["arguments"].as_str().unwrap(),
            );
            (
                t["id"].as_str().unwrap().to_owned(),
                name.to_owned(),
                args.to_owned(),
            )
        })
        .collect();
    assert_eq!(want.len(), 2, "{whole}");
    assert_eq!(stream_status, 200);
    let mut calls: Vec<(String, String, String, usize)> = Vec::new();
    let mut finish = None;
    for ch in chunks(&events) {
        let choice = &ch["choices"][0];
        finish = choice["finish_reason"]
            .as_str()
            .map(str::to_owned)
            .or(finish);
        for d in choice["delta"]["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let i = d["index"].as_u64().unwrap() as usize;
            let f = &d["function"];
            if let Some(id) = d["id"].as_str() {
                // The first chunk of a call: index, id, type and name, arguments empty.
                assert_eq!(i, calls.len(), "calls open in index order: {d}");
                assert_eq!(d["type"], "function", "{d}");
                assert_eq!(f["arguments"], "", "{d}");
                let name = f["name"].as_str().unwrap().to_owned();
                calls.push((id.to_owned(), name, String::new(), 0));
            } else {
                assert!(d.get("id").is_none_or(Value::is_null), "{d}");
                let call = &mut calls[i];
                call.2.push_str(f["arguments"].as_str().unwrap());
                call.3 += 1;
            }
        }
    }
    assert_eq!(finish.as_deref(), Some("tool_calls"));
    for ((_, name, args, pieces), (_, want_name, want_args)) in calls.iter().zip(&want) {
        assert_eq!((name, args), (want_name, want_args), "joined deltas");
        assert!(*pieces >= 3, "{name}: arguments in {pieces} piece(s)");
    }
    assert_eq!(calls.len(), 2);
    // Ids are made per response; each call's is stable within its stream.
    assert_ne!(calls[0].0, calls[1].0);
}

/// Anthropic structured outputs (`messages.parse` into a Pydantic model, streamed and not) and
/// strict tools, through the official `anthropic` SDK.
#[test]
fn anthropic_structured_outputs_and_strict_tools() {
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_owned());
    run_script_with(
        &python,
        "anthropic_structured.py",
        "anthropic",
        &["--base-url", &qwen().base, "--model", common::MODEL],
    );
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
    assert!(
        std::path::Path::new(&python).exists(),
        "{python} is missing: scripts/test.sh makes litellm's virtualenv there \
         (or set LITELLM_PYTHON to an interpreter with litellm 1.80)"
    );
    run_script_with(
        &python,
        "litellm_client.py",
        "litellm",
        &["--base-url", &qwen().url("/v1"), "--model", common::MODEL],
    );
}
