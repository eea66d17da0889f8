//! The Responses API's request shape -> the chat path's: input items (messages,
//! `function_call`, `function_call_output`) become chat messages, function tools and
//! `tool_choice` their chat forms, so one template, tool grammar and parser serve every API.
//! The parts pagoda does not serve (built-in tools, `background`, ...) are refused by name;
//! keys an item or tool does not have are ignored and noted (`prepare/field_policy.rs`).

use pagoda_protocol::responses::{ResponseInput, ResponsesRequest};
use pagoda_protocol::{ChatMessage, FunctionCall, Role, ToolCall};
use serde_json::{Map, Value, json};

use crate::prepare::field_policy::{Ignored, UnknownFields};
use crate::prepare::validate::str_field;
use crate::prepare::validation_error::ValidationError;

/// Responses fields pagoda reads from `extra` (`check_extra`), beside the typed ones.
const EXTRA_FIELDS: &[&str] = &[
    "background",
    "include",
    "reasoning",
    "truncation",
    "service_tier",
    "safety_identifier",
    "top_logprobs",
    "max_tool_calls",
    "conversation",
    "prompt",
    "prompt_cache_key",
    "stream_options",
];

/// Known Responses fields pagoda refuses unless they ask for what it does anyway; anything else
/// in `extra` is unknown, for the field policy to judge.
pub fn check_extra(
    extra: &Map<String, Value>,
    policy: UnknownFields,
    ignored: &mut Ignored,
) -> Result<(), ValidationError> {
    let mut unknown = Vec::new();
    for (k, v) in extra {
        let refuse = |why: &str| Err(ValidationError::unsupported(k.as_str(), why));
        match k.as_str() {
            "background" if v == &json!(false) || v.is_null() => {}
            "background" => return refuse("responses run in the foreground only"),
            "include" if v.as_array().is_some_and(Vec::is_empty) || v.is_null() => {}
            "include" => return refuse("no extra output data is available"),
            "reasoning" if v.is_null() => {}
            "reasoning" => return refuse("no reasoning models are served"),
            "truncation" if v == "disabled" || v.is_null() => {}
            "truncation" => {
                return refuse("only \"disabled\": a prompt over the context is refused");
            }
            "service_tier" if v == "auto" || v == "default" || v.is_null() => {}
            "service_tier" => return refuse("only \"auto\" and \"default\""),
            "safety_identifier" if v.is_string() => {
                tracing::info!(safety_identifier = v.as_str(), "responses request");
            }
            "top_logprobs" | "max_tool_calls" | "conversation" | "prompt" | "prompt_cache_key"
            | "stream_options" => {
                if !v.is_null() {
                    return refuse("not supported yet");
                }
            }
            _ => unknown.push(k.as_str()),
        }
    }
    let known: Vec<&str> = ResponsesRequest::FIELDS
        .iter()
        .chain(EXTRA_FIELDS)
        .copied()
        .collect();
    ignored.top_level_keys(policy, unknown, &known)
}

/// The input as chat messages, appended to `out`.
pub fn chat_messages(
    input: &ResponseInput,
    out: &mut Vec<ChatMessage>,
    ignored: &mut Ignored,
) -> Result<(), ValidationError> {
    let items = match input {
        ResponseInput::Text(t) => {
            out.push(ChatMessage::new(Role::User, t.as_str()));
            return Ok(());
        }
        ResponseInput::Items(items) => items,
    };
    for (i, item) in items.iter().enumerate() {
        let field = format!("input[{i}]");
        let kind = match item.get("type") {
            None => "message",
            Some(Value::String(s)) => s.as_str(),
            Some(_) => {
                return Err(ValidationError::invalid(
                    format!("{field}.type"),
                    "a string",
                ));
            }
        };
        match kind {
            "message" => {
                ignored.content_keys(item, &field, &["type", "role", "content", "id", "status"]);
                out.push(message(item, &field)?);
            }
            "function_call" => {
                ignored.content_keys(
                    item,
                    &field,
                    &["type", "call_id", "name", "arguments", "id", "status"],
                );
                let call = ToolCall {
                    id: str_field(item, &field, "call_id")?.to_owned(),
                    kind: "function".to_owned(),
                    function: FunctionCall {
                        name: str_field(item, &field, "name")?.to_owned(),
                        arguments: str_field(item, &field, "arguments")?.to_owned(),
                    },
                };
                // Calls of one turn share one assistant message.
                match out.last_mut() {
                    Some(m) if m.role == Role::Assistant && m.tool_calls.is_some() => {
                        m.tool_calls.get_or_insert_with(Vec::new).push(call);
                    }
                    _ => {
                        let mut m = ChatMessage::new(Role::Assistant, "");
                        m.content = None;
                        m.tool_calls = Some(vec![call]);
                        out.push(m);
                    }
                }
            }
            "function_call_output" => {
                ignored.content_keys(item, &field, &["type", "call_id", "output", "id", "status"]);
                let output = match item.get("output") {
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Array(_)) => {
                        text_parts(item.get("output"), &format!("{field}.output"))?
                    }
                    _ => {
                        return Err(ValidationError::invalid(
                            format!("{field}.output"),
                            "a string",
                        ));
                    }
                };
                let mut m = ChatMessage::new(Role::Tool, output);
                m.tool_call_id = Some(str_field(item, &field, "call_id")?.to_owned());
                out.push(m);
            }
            other => {
                return Err(ValidationError::unsupported(
                    format!("{field}.type"),
                    format!(
                        "input items of type {other:?} are not supported; only \"message\", \"function_call\" and \"function_call_output\""
                    ),
                ));
            }
        }
    }
    Ok(())
}

fn message(item: &Map<String, Value>, field: &str) -> Result<ChatMessage, ValidationError> {
    let role = match item.get("role").and_then(Value::as_str) {
        Some("user") => Role::User,
        Some("assistant") => Role::Assistant,
        Some("system") => Role::System,
        Some("developer") => Role::Developer,
        other => {
            return Err(ValidationError::invalid_value(
                format!("{field}.role"),
                "\"user\", \"assistant\", \"system\" or \"developer\"",
                format!("{other:?}"),
            ));
        }
    };
    let text = text_parts(item.get("content"), &format!("{field}.content"))?;
    Ok(ChatMessage::new(role, text))
}

/// A string, or `input_text` / `output_text` parts joined with newlines.
fn text_parts(content: Option<&Value>, field: &str) -> Result<String, ValidationError> {
    match content {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => {
            let mut texts = Vec::with_capacity(parts.len());
            for (j, p) in parts.iter().enumerate() {
                let f = format!("{field}[{j}]");
                let kind = p.get("type").and_then(Value::as_str);
                match kind {
                    Some("input_text" | "output_text" | "text") => {
                        let text = p.get("text").and_then(Value::as_str).ok_or_else(|| {
                            ValidationError::invalid(format!("{f}.text"), "a string")
                        })?;
                        texts.push(text);
                    }
                    other => {
                        return Err(ValidationError::unsupported(
                            format!("{f}.type"),
                            format!("content parts of type {other:?} are not supported; only text"),
                        ));
                    }
                }
            }
            Ok(texts.join("\n"))
        }
        _ => Err(ValidationError::invalid(
            field,
            "a string or a list of text parts",
        )),
    }
}

/// Function tools (`{"type": "function", "name", "description", "parameters", "strict"}`) as
/// chat tools; built-in tools are refused by type.
pub fn chat_tools(
    tools: &[Map<String, Value>],
    ignored: &mut Ignored,
) -> Result<Value, ValidationError> {
    let mut out = Vec::with_capacity(tools.len());
    for (i, t) in tools.iter().enumerate() {
        let field = format!("tools[{i}]");
        match t.get("type").and_then(Value::as_str) {
            Some("function") => {}
            other => {
                return Err(ValidationError::unsupported(
                    format!("{field}.type"),
                    format!(
                        "built-in tools such as {other:?} are not available; only function tools"
                    ),
                ));
            }
        }
        ignored.content_keys(
            t,
            &field,
            &["type", "name", "description", "parameters", "strict"],
        );
        let mut f = Map::new();
        f.insert("name".into(), json!(str_field(t, &field, "name")?));
        for k in ["description", "parameters", "strict"] {
            if let Some(v) = t.get(k).filter(|v| !v.is_null()) {
                f.insert(k.into(), v.clone());
            }
        }
        out.push(json!({"type": "function", "function": f}));
    }
    Ok(Value::Array(out))
}

/// `tool_choice` in chat's form.
pub fn chat_tool_choice(c: &Value) -> Result<Value, ValidationError> {
    match c {
        Value::String(_) => Ok(c.clone()),
        Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("function") => {
            let name = o
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| ValidationError::invalid("tool_choice.name", "a string"))?;
            Ok(json!({"type": "function", "function": {"name": name}}))
        }
        Value::Object(o) => Err(ValidationError::unsupported(
            "tool_choice.type",
            format!(
                "only \"none\", \"auto\", \"required\" or a function, got {:?}",
                o.get("type")
            ),
        )),
        _ => Err(ValidationError::invalid(
            "tool_choice",
            "a string or an object",
        )),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn items_become_chat_messages() {
        let input: ResponseInput = serde_json::from_value(json!([
            {"role": "user", "content": "Weather in Paris?"},
            {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "18C"},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "And?"}]}
        ]))
        .unwrap();
        let mut out = Vec::new();
        chat_messages(&input, &mut out, &mut Ignored::default()).unwrap();
        let roles: Vec<Role> = out.iter().map(|m| m.role).collect();
        assert_eq!(roles, [Role::User, Role::Assistant, Role::Tool, Role::User]);
        assert_eq!(out[1].tool_calls.as_ref().unwrap()[0].id, "call_1");
        assert_eq!(out[2].tool_call_id.as_deref(), Some("call_1"));
    }

    #[test]
    fn unsupported_parts_are_named() {
        let t: Vec<Map<String, Value>> =
            serde_json::from_value(json!([{"type": "web_search_preview"}])).unwrap();
        assert_eq!(
            chat_tools(&t, &mut Ignored::default())
                .unwrap_err()
                .field()
                .as_deref(),
            Some("tools[0].type")
        );
        let mut extra = Map::new();
        extra.insert("background".into(), json!(true));
        assert_eq!(
            check_extra(&extra, UnknownFields::Reject, &mut Ignored::default())
                .unwrap_err()
                .field()
                .as_deref(),
            Some("background")
        );
        extra.insert("background".into(), json!(false));
        assert!(check_extra(&extra, UnknownFields::Reject, &mut Ignored::default()).is_ok());
        extra.insert("frobnicate".into(), json!(1));
        assert!(matches!(
            check_extra(&extra, UnknownFields::Reject, &mut Ignored::default()),
            Err(ValidationError::UnknownField { .. })
        ));
    }
}
