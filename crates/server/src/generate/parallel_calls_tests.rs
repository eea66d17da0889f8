//! Two tool calls in one reply, fed in small pieces through the Messages and Responses
//! formatters (the chat one is tested end to end in tests/client_compat.rs, where a regex can
//! force the model's output; these two APIs have no such field): each call's streamed argument
//! pieces, joined, are the non-streamed arguments byte for byte, and the calls keep their order.
#![allow(clippy::unwrap_used)]

use pagoda_frontend::ToolCallFormat;
use pagoda_protocol::{FinishReason as WireFinish, Usage};
use serde_json::{Value, json};

use crate::api::{anthropic, responses};
use crate::config::ServerConfig;
use crate::generate::chat_output::ChoiceOutput;
use crate::generate::generation::{ChoiceUpdate, Finish};
use crate::generate::stream::ChoiceFormatter;
use crate::prepare::tools::{ToolChoice, ToolSetup};
use crate::state::AppState;

const REPLY: &str = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \
                     \"days\": [1, 2, 3], \"note\": \"a \\\"quoted\\\" word\"}}\n</tool_call>\n\
                     <tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"city\": \"Tokyo, Japan\"}}\n</tool_call>";

fn setup() -> ToolSetup {
    let tool = |name: &str| {
        json!({"type": "function", "function": {"name": name,
        "parameters": {"type": "object"}}})
    };
    ToolSetup {
        format: ToolCallFormat::Hermes,
        tools: vec![tool("get_weather"), tool("get_time")],
        choice: ToolChoice::Auto,
        inject: false,
        strict: false,
    }
}

/// The reply in pieces of `size` characters, the last one finishing the choice.
fn updates(size: usize) -> Vec<ChoiceUpdate> {
    let chars: Vec<char> = REPLY.chars().collect();
    let pieces: Vec<String> = chars.chunks(size).map(|c| c.iter().collect()).collect();
    let last = pieces.len() - 1;
    pieces
        .into_iter()
        .enumerate()
        .map(|(i, text)| ChoiceUpdate {
            text,
            finish: (i == last).then_some(Finish {
                reason: WireFinish::Stop,
                stop_reason: None,
            }),
            ..Default::default()
        })
        .collect()
}

/// The `data:` JSON of each SSE event in `text`.
fn data(text: &str) -> Vec<Value> {
    text.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect()
}

const WANT: [(&str, &str); 2] = [
    (
        "get_weather",
        r#"{"city":"Paris","days":[1,2,3],"note":"a \"quoted\" word"}"#,
    ),
    ("get_time", r#"{"city":"Tokyo, Japan"}"#),
];

#[test]
fn messages_input_json_deltas_join_to_each_tool_use_input() {
    let state = AppState::new(ServerConfig::default());
    let tools = setup();
    for size in [1, 2, 3, 7] {
        let mut f = anthropic::output::Formatter::new(&state, "m", 5, Some(&tools), true, "");
        let mut events = Vec::new();
        for u in updates(size) {
            events.extend(data(&f.events(u)));
        }
        // Per content block: the tool name at its start, then the joined partial JSON.
        let mut blocks: Vec<(String, String)> = Vec::new();
        for e in &events {
            match e["type"].as_str() {
                Some("content_block_start") if e["content_block"]["type"] == "tool_use" => {
                    let name = e["content_block"]["name"].as_str().unwrap().to_owned();
                    blocks.push((name, String::new()));
                }
                Some("content_block_delta") if e["delta"]["type"] == "input_json_delta" => {
                    let piece = e["delta"]["partial_json"].as_str().unwrap();
                    blocks.last_mut().unwrap().1.push_str(piece);
                }
                _ => {}
            }
        }
        let got: Vec<(&str, &str)> = blocks.iter().map(|(n, a)| (&n[..], &a[..])).collect();
        assert_eq!(got, WANT, "pieces of {size}");
        let mut whole = anthropic::output::Formatter::new(&state, "m", 5, Some(&tools), true, "");
        for u in updates(size) {
            whole.absorb(u);
        }
        let body = serde_json::to_value(whole.response(Usage::default())).unwrap();
        let inputs: Vec<(String, String)> = body["content"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|b| b["type"] == "tool_use")
            .map(|b| {
                (
                    b["name"].as_str().unwrap().to_owned(),
                    b["input"].to_string(),
                )
            })
            .collect();
        assert_eq!(inputs, blocks, "pieces of {size}: whole != joined");
        assert_eq!(body["stop_reason"], "tool_use");
    }
}

#[test]
fn responses_argument_deltas_join_to_each_function_call() {
    let state = AppState::new(ServerConfig::default());
    let tools = setup();
    let echo: pagoda_protocol::responses::Response = serde_json::from_value(json!({
        "id": "", "object": "response", "created_at": 0, "status": "in_progress",
        "error": null, "incomplete_details": null, "instructions": null,
        "max_output_tokens": null, "model": "m", "output": [], "parallel_tool_calls": true,
        "previous_response_id": null, "temperature": 1.0, "top_p": 1.0, "tool_choice": "auto",
        "tools": [], "text": {"format": {"type": "text"}}, "store": false, "metadata": {},
        "user": null, "usage": null}))
    .unwrap();
    let output = || ChoiceOutput::new(state.config().reasoning_parser, Some(&tools), "");
    for size in [1, 2, 3, 7] {
        let mut f = responses::output::Formatter::new(&state, echo.clone(), output(), vec![]);
        let mut events = Vec::new();
        for u in updates(size) {
            events.extend(data(&f.events(u)));
        }
        // By output index: the item's name when added, then its argument deltas, joined.
        let mut calls: Vec<(u64, String, String)> = Vec::new();
        for e in &events {
            match e["type"].as_str() {
                Some("response.output_item.added") if e["item"]["type"] == "function_call" => {
                    let name = e["item"]["name"].as_str().unwrap().to_owned();
                    calls.push((e["output_index"].as_u64().unwrap(), name, String::new()));
                }
                Some("response.function_call_arguments.delta") => {
                    let i = e["output_index"].as_u64().unwrap();
                    let call = calls.iter_mut().find(|c| c.0 == i).unwrap();
                    call.2.push_str(e["delta"].as_str().unwrap());
                }
                _ => {}
            }
        }
        let got: Vec<(&str, &str)> = calls.iter().map(|(_, n, a)| (&n[..], &a[..])).collect();
        assert_eq!(got, WANT, "pieces of {size}");
        let mut whole = responses::output::Formatter::new(&state, echo.clone(), output(), vec![]);
        for u in updates(size) {
            whole.absorb(u);
        }
        let body = serde_json::to_value(whole.response(Usage::default())).unwrap();
        let args: Vec<(&str, &str)> = body["output"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|o| o["type"] == "function_call")
            .map(|o| {
                (
                    o["name"].as_str().unwrap(),
                    o["arguments"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(args, WANT, "pieces of {size}: whole");
    }
}
