//! The generic tool format for chat templates that ignore `tools` (SmolLM2's): the tool list goes
//! into the system message, and the model answers with one JSON object, `{"tool_call": {"name",
//! "arguments"}}` or `{"response": "..."}` (after llama.cpp's generic chat handler, chat.cpp
//! common_chat_params_init_generic). Documented in docs/tool-calling.md.

use serde_json::{Map, Value, json};

use super::{ParsedToolCall, Piece, call_from_json};

/// First line of the injected system-prompt section.
pub const GENERIC_SYSTEM_HEADER: &str = "You can call the following tools.";

/// The system-prompt section that describes `tools` (the request's `tools` array) and the reply
/// format.
pub fn generic_system_prompt(tools: &[Value]) -> String {
    let mut s = String::from(GENERIC_SYSTEM_HEADER);
    s.push_str(" Each is described by a JSON object:\n");
    for t in tools {
        let f = t.get("function").unwrap_or(t);
        s.push_str(&f.to_string());
        s.push('\n');
    }
    s.push_str(
        "\nTo call a tool, reply with only this JSON object:\n\
         {\"tool_call\": {\"name\": \"<tool name>\", \"arguments\": {<the tool's parameters>}}}\n\
         To answer without a tool, reply with only this JSON object:\n\
         {\"response\": \"<your answer>\"}",
    );
    s
}

/// History in the generic format: an assistant message with `tool_calls` becomes its JSON reply
/// (`{"tool_call": ...}`, or `{"tool_calls": [...]}` for several), and a `tool` message becomes a
/// user message `{"tool_response": {"tool_call_id", "content"}}`, since such templates know no
/// tool role. `messages` are OpenAI-shaped JSON objects; others pass through.
pub fn generic_history(messages: &[Value]) -> Vec<Value> {
    messages
        .iter()
        .map(|m| {
            let role = m.get("role").and_then(Value::as_str).unwrap_or("");
            match (role, m.get("tool_calls").and_then(Value::as_array)) {
                ("assistant", Some(calls)) if !calls.is_empty() => {
                    let calls: Vec<Value> = calls
                        .iter()
                        .map(|c| {
                            let f = c.get("function").unwrap_or(c);
                            json!({"name": f.get("name").cloned().unwrap_or(Value::Null),
                                   "arguments": f.get("arguments").cloned().unwrap_or(json!({}))})
                        })
                        .collect();
                    let reply = match <[Value; 1]>::try_from(calls) {
                        Ok([one]) => json!({"tool_call": one}),
                        Err(many) => json!({"tool_calls": many}),
                    };
                    let mut out = Map::new();
                    out.insert("role".into(), json!("assistant"));
                    out.insert("content".into(), json!(reply.to_string()));
                    Value::Object(out)
                }
                ("tool", _) => {
                    let reply = json!({"tool_response": {
                        "tool_call_id": m.get("tool_call_id").cloned().unwrap_or(Value::Null),
                        "content": m.get("content").cloned().unwrap_or(Value::Null),
                    }});
                    json!({"role": "user", "content": reply.to_string()})
                }
                _ => m.clone(),
            }
        })
        .collect()
}

/// The reply is one JSON object, so a reply that starts with `{` is held until the end and
/// parsed whole; any other reply is plain content, passed through as it comes.
#[derive(Debug, Default)]
pub(super) struct GenericParser {
    buf: String,
    mode: Mode,
}

#[derive(Debug, Default, PartialEq, Eq)]
enum Mode {
    #[default]
    Undecided,
    Json,
    Text,
}

impl GenericParser {
    pub(super) fn push(&mut self, text: &str) -> Vec<Piece> {
        match self.mode {
            Mode::Text => vec![Piece::Content(text.to_owned())],
            Mode::Json => {
                self.buf.push_str(text);
                Vec::new()
            }
            Mode::Undecided => {
                self.buf.push_str(text);
                match self.buf.trim_start().chars().next() {
                    None => Vec::new(),
                    Some('{') => {
                        self.mode = Mode::Json;
                        Vec::new()
                    }
                    Some(_) => {
                        self.mode = Mode::Text;
                        vec![Piece::Content(std::mem::take(&mut self.buf))]
                    }
                }
            }
        }
    }

    pub(super) fn finish(&mut self) -> Vec<Piece> {
        let text = std::mem::take(&mut self.buf);
        if self.mode != Mode::Json {
            return vec![Piece::Content(text)];
        }
        let Ok(Value::Object(obj)) = serde_json::from_str::<Value>(text.trim()) else {
            return vec![Piece::Content(text)];
        };
        if let Some(call) = obj.get("tool_call").and_then(call_from_json) {
            return vec![Piece::Call(call)];
        }
        if let Some(list) = obj.get("tool_calls").and_then(Value::as_array) {
            let calls: Option<Vec<ParsedToolCall>> = list.iter().map(call_from_json).collect();
            if let Some(calls) = calls {
                return calls.into_iter().map(Piece::Call).collect();
            }
        }
        match obj.get("response") {
            Some(Value::String(s)) => vec![Piece::Content(s.clone())],
            _ => vec![Piece::Content(text)],
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::{ToolCallFormat, ToolCallStream, ToolEvent};
    use super::*;

    fn run(text: &str, cut: usize) -> Vec<ToolEvent> {
        let mut s = ToolCallStream::new(ToolCallFormat::Generic);
        let mut ev = s.push(&text[..cut]);
        ev.extend(s.push(&text[cut..]));
        ev.extend(s.finish());
        // Merge adjacent content so split points compare equal.
        let mut out: Vec<ToolEvent> = Vec::new();
        for e in ev {
            match (out.last_mut(), e) {
                (Some(ToolEvent::Content(a)), ToolEvent::Content(b)) => a.push_str(&b),
                (_, e) => out.push(e),
            }
        }
        out
    }

    #[test]
    fn call_response_and_text_at_every_split() {
        let call = r#" {"tool_call": {"name": "get_weather", "arguments": {"city": "Paris"}}}"#;
        let resp = r#"{"response": "Hi there"}"#;
        let text = "Just text, no JSON {";
        for (input, want) in [
            (
                call,
                vec![ToolEvent::Call {
                    index: 0,
                    call: ParsedToolCall {
                        name: "get_weather".into(),
                        arguments: r#"{"city":"Paris"}"#.into(),
                    },
                }],
            ),
            (resp, vec![ToolEvent::Content("Hi there".into())]),
            (text, vec![ToolEvent::Content(text.into())]),
        ] {
            for cut in 0..=input.len() {
                assert_eq!(run(input, cut), want, "{input} cut at {cut}");
            }
        }
    }

    #[test]
    fn history_and_system_prompt() {
        let tools = vec![json!({"type": "function", "function": {"name": "f", "parameters": {}}})];
        let p = generic_system_prompt(&tools);
        assert!(
            p.starts_with(GENERIC_SYSTEM_HEADER) && p.contains(r#"{"name":"f","parameters":{}}"#)
        );
        let h = generic_history(&[
            json!({"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}}]}),
            json!({"role": "tool", "tool_call_id": "c1", "content": "42"}),
        ]);
        assert_eq!(
            h[0]["content"],
            r#"{"tool_call":{"name":"f","arguments":{"x":1}}}"#
        );
        assert_eq!(h[1]["role"], "user");
        assert_eq!(
            h[1]["content"],
            r#"{"tool_response":{"tool_call_id":"c1","content":"42"}}"#
        );
    }
}
