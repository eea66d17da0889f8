//! Structured output and tool calling through the real server: SmolLM2 (its template ignores
//! `tools`, so the generic injected format) and Qwen2.5-Coder (its own Hermes template).
//! Streamed and non-streamed calls reassemble the same; constrained arguments and JSON outputs
//! validate against their schemas; bad schemas, regexes, grammars and tool choices are 400s
//! naming the problem.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::sync::OnceLock;

use common::{TestServer, chunks, client, error_of, post, post_stream};
use pagoda_testkit::json_schema::assert_valid;
use serde_json::{Value, json};

fn smol() -> &'static TestServer {
    static S: OnceLock<TestServer> = OnceLock::new();
    S.get_or_init(|| TestServer::start(common::small_setup(), common::config()))
}

/// The binary's one Qwen server (a second copy of the model would double its load).
fn qwen() -> &'static TestServer {
    crate::front_apis::qwen()
}

fn weather_tool() -> Value {
    json!({"type": "function", "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {"type": "object",
            "properties": {"city": {"type": "string", "description": "City name"},
                           "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"]}}})
}

fn time_tool() -> Value {
    json!({"type": "function", "function": {
        "name": "get_time",
        "description": "Get the current time in a timezone",
        "parameters": {"type": "object",
            "properties": {"timezone": {"type": "string"}},
            "required": ["timezone"]}}})
}

fn tool_request(tool_choice: Value, max_tokens: u32) -> Value {
    json!({"model": common::MODEL,
           "messages": [{"role": "user", "content": "What is the weather like in Paris today?"}],
           "tools": [weather_tool(), time_tool()],
           "tool_choice": tool_choice,
           "temperature": 0,
           "max_tokens": max_tokens})
}

/// (name, arguments) of a non-streamed answer's calls.
fn calls_of(v: &Value) -> Vec<(String, String)> {
    v["choices"][0]["message"]["tool_calls"]
        .as_array()
        .map(|l| {
            l.iter()
                .map(|c| {
                    assert_eq!(c["type"], "function", "{c}");
                    assert!(c["id"].as_str().unwrap().starts_with("call_"), "{c}");
                    (
                        c["function"]["name"].as_str().unwrap().to_owned(),
                        c["function"]["arguments"].as_str().unwrap().to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Reassembles a stream: (content, calls by index, finish_reason). Checks that every call's
/// first piece has id, type and name, and that no call markup reaches content.
fn reassemble(events: &[String]) -> (String, Vec<(String, String)>, String) {
    let mut content = String::new();
    let mut calls: Vec<(String, String)> = Vec::new();
    let mut finish = String::new();
    for c in chunks(events) {
        let Some(choice) = c["choices"].get(0) else {
            continue;
        };
        let d = &choice["delta"];
        if let Some(t) = d["content"].as_str() {
            content.push_str(t);
        }
        for tc in d["tool_calls"].as_array().into_iter().flatten() {
            let i = tc["index"].as_u64().unwrap() as usize;
            if i == calls.len() {
                assert!(tc["id"].as_str().unwrap().starts_with("call_"), "{tc}");
                assert_eq!(tc["type"], "function");
                calls.push((
                    tc["function"]["name"].as_str().unwrap().to_owned(),
                    String::new(),
                ));
            }
            if let Some(a) = tc["function"]["arguments"].as_str() {
                calls[i].1.push_str(a);
            }
        }
        if let Some(f) = choice["finish_reason"].as_str() {
            finish = f.to_owned();
        }
    }
    assert!(!content.contains("tool_call"), "markup leaked: {content:?}");
    (content, calls, finish)
}

fn tool_schema(name: &str) -> Value {
    [weather_tool(), time_tool()]
        .into_iter()
        .find(|t| t["function"]["name"] == name)
        .unwrap()["function"]["parameters"]
        .clone()
}

/// Non-streamed and streamed answers to `body` agree, and calls validate when required.
async fn check_tool_answers(server: &TestServer, body: Value, required: bool) {
    let c = client();
    let url = server.url("/v1/chat/completions");
    let (status, v) = post(&c, &url, &body).await;
    assert_eq!(status, 200, "{v}");
    let calls = calls_of(&v);
    let message = &v["choices"][0]["message"];
    let finish = v["choices"][0]["finish_reason"]
        .as_str()
        .unwrap()
        .to_owned();
    if !calls.is_empty() {
        // A named tool_choice asked for this call: OpenAI reports "stop" then.
        let want = if body["tool_choice"].is_object() {
            "stop"
        } else {
            "tool_calls"
        };
        assert_eq!(finish, want, "{v}");
    }
    if required {
        assert_eq!(calls.len(), 1, "{v}");
        assert!(message["content"].is_null(), "{v}");
    }
    for (name, args) in &calls {
        let parsed: Value = serde_json::from_str(args).unwrap();
        if required {
            assert_valid(&tool_schema(name), &parsed);
        }
    }
    let content = message["content"].as_str().unwrap_or("");
    assert!(!content.contains("tool_call"), "{v}");

    let mut sbody = body.clone();
    sbody["stream"] = json!(true);
    let (status, events) = post_stream(&c, &url, &sbody).await;
    assert_eq!(status, 200);
    let (s_content, s_calls, s_finish) = reassemble(&events);
    assert_eq!(s_calls, calls, "streamed calls differ");
    assert_eq!(s_content, content);
    assert_eq!(s_finish, finish);
}

#[tokio::test]
async fn qwen_tool_calls_required_named_and_auto() {
    let s = qwen();
    check_tool_answers(s, tool_request(json!("required"), 48), true).await;
    check_tool_answers(
        s,
        tool_request(
            json!({"type": "function", "function": {"name": "get_time"}}),
            48,
        ),
        true,
    )
    .await;
    // Free decoding, parsed afterwards: whatever Qwen writes, stream and JSON agree.
    check_tool_answers(s, tool_request(json!("auto"), 48), false).await;
}

#[tokio::test]
async fn smol_tool_calls_through_the_injected_format() {
    let s = smol();
    check_tool_answers(s, tool_request(json!("required"), 48), true).await;
    // Generic `auto` is constrained to a call or a {"response": ...}.
    check_tool_answers(s, tool_request(json!("auto"), 48), false).await;
}

#[tokio::test]
async fn tool_history_is_accepted_on_both_templates() {
    let c = client();
    for s in [smol(), qwen()] {
        let body = json!({"model": common::MODEL, "max_tokens": 4, "temperature": 0,
            "tools": [weather_tool()],
            "messages": [
                {"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
                    "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"celsius\"}"}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "21 degrees, sunny"}]});
        let (status, v) = post(&c, &s.url("/v1/chat/completions"), &body).await;
        assert_eq!(status, 200, "{v}");
    }
}

#[tokio::test]
async fn response_format_and_structured_outputs_are_enforced() {
    let c = client();
    let url = smol().url("/v1/chat/completions");
    let schema = json!({"type": "object",
        "properties": {"name": {"type": "string", "maxLength": 12},
                       "age": {"type": "integer", "minimum": 0, "maximum": 120}},
        "required": ["name", "age"], "additionalProperties": false});
    let ask = |extra: Value| {
        let mut b = json!({"model": common::MODEL, "temperature": 0, "max_tokens": 40,
            "messages": [{"role": "user", "content": "Describe a person as JSON."}]});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        b
    };
    let (status, v) = post(
        &c,
        &url,
        &ask(json!({"response_format": {"type": "json_schema",
            "json_schema": {"name": "person", "schema": schema, "strict": true}}})),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");
    let out: Value =
        serde_json::from_str(v["choices"][0]["message"]["content"].as_str().unwrap()).unwrap();
    assert_valid(&schema, &out);

    let (status, v) = post(
        &c,
        &url,
        &ask(json!({"structured_outputs": {"regex": "[0-9]{3}-[a-z]{2}"}})),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    let text = v["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(
        text.len() == 6 && text[..3].bytes().all(|b| b.is_ascii_digit()) && &text[3..4] == "-",
        "{text:?}"
    );

    let (status, v) = post(
        &c,
        &url,
        &ask(json!({"structured_outputs": {"choice": ["yes", "no", "maybe"]}})),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    let text = v["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(["yes", "no", "maybe"].contains(&text), "{text:?}");

    // Completions endpoint, json_object, cut short: `length`, never a claim of completeness.
    let (status, v) = post(
        &c,
        &smol().url("/v1/completions"),
        &json!({"model": common::MODEL, "prompt": "A JSON object describing a cat:", "max_tokens": 3,
                "temperature": 0, "response_format": {"type": "json_object"}}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "length", "{v}");
    assert!(
        v["choices"][0]["text"]
            .as_str()
            .unwrap()
            .trim_start()
            .starts_with('{'),
        "{v}"
    );
}

#[tokio::test]
async fn bad_constraints_and_tool_choices_are_400s_naming_the_problem() {
    let c = client();
    let url = smol().url("/v1/chat/completions");
    let base = json!({"model": common::MODEL, "max_tokens": 4,
        "messages": [{"role": "user", "content": "Hi"}]});
    let cases = [
        (
            json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x",
                "schema": {"type": "object", "properties": {"a": {"type": "strin"}}}}}}),
            "response_format",
        ),
        (
            json!({"structured_outputs": {"regex": "a(b"}}),
            "structured_outputs",
        ),
        (
            json!({"structured_outputs": {"grammar": "start: foo\nbar: \"x\""}}),
            "structured_outputs",
        ),
        (
            json!({"structured_outputs": {"regex": "a", "choice": ["b"]}}),
            "structured_outputs",
        ),
        (
            json!({"tools": [weather_tool()],
                   "tool_choice": {"type": "function", "function": {"name": "launch_rocket"}}}),
            "tool_choice",
        ),
        (
            json!({"tools": [{"type": "function", "function": {"name": "bad name!"}}]}),
            "tools[0]",
        ),
    ];
    for (extra, param) in cases {
        let mut body = base.clone();
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        let (status, v) = post(&c, &url, &body).await;
        assert_eq!(status, 400, "{extra}: {v}");
        let e = error_of(&v);
        assert_eq!(e["param"], param, "{v}");
        let message = e["message"].as_str().unwrap();
        assert!(message.len() > 20, "{message}");
        if param == "tool_choice" {
            assert!(message.contains("launch_rocket"), "{message}");
        }
        println!("{extra} -> {message}");
    }
}
