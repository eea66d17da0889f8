//! Anthropic's request shape -> the chat path's: `system` and content blocks become chat
//! messages (`tool_use` an assistant's `tool_calls`, `tool_result` a `tool` message), `tools`
//! and `tool_choice` their OpenAI forms, so the same template, tool grammar and parser serve
//! both APIs. Unsupported blocks and tools are refused by name; keys a block, message or tool
//! does not have are ignored and noted (`prepare/field_policy.rs`).

use pagoda_protocol::anthropic::{AnthropicMessage, BlockContent};
use pagoda_protocol::{ChatMessage, FunctionCall, Role, ToolCall};
use serde_json::{Map, Value, json};

use crate::prepare::field_policy::{self, Ignored};
use crate::prepare::validate::str_field;
use crate::prepare::validation_error::ValidationError;

/// The conversation as chat messages: `system` first, then each turn's blocks.
pub fn chat_messages(
    system: Option<&BlockContent>,
    messages: &[AnthropicMessage],
    ignored: &mut Ignored,
) -> Result<Vec<ChatMessage>, ValidationError> {
    let mut out = Vec::with_capacity(messages.len() + 1);
    if let Some(s) = system {
        out.push(ChatMessage::new(
            Role::System,
            block_text(s, "system", ignored)?,
        ));
    }
    for (i, m) in messages.iter().enumerate() {
        ignored.content_keys(&m.extra, &format!("messages[{i}]"), &[]);
        let role = match m.role.as_str() {
            "user" => Role::User,
            "assistant" => Role::Assistant,
            other => {
                return Err(ValidationError::invalid_value(
                    format!("messages[{i}].role"),
                    "\"user\" or \"assistant\"",
                    format!("{other:?}"),
                ));
            }
        };
        match &m.content {
            BlockContent::Text(t) => out.push(ChatMessage::new(role, t.as_str())),
            BlockContent::Blocks(blocks) => turn(i, role, blocks, &mut out, ignored)?,
        }
    }
    Ok(out)
}

/// The keys of a text block.
const TEXT_KEYS: &[&str] = &["type", "text", "cache_control", "citations"];

/// One turn of blocks: tool results first (each a `tool` message, as chat templates expect them
/// right after the calls), then the turn's text and calls as one message.
fn turn(
    i: usize,
    role: Role,
    blocks: &[Map<String, Value>],
    out: &mut Vec<ChatMessage>,
    ignored: &mut Ignored,
) -> Result<(), ValidationError> {
    let mut texts = Vec::new();
    let mut calls = Vec::new();
    for (j, b) in blocks.iter().enumerate() {
        let field = format!("messages[{i}].content[{j}]");
        let kind = b.get("type").and_then(Value::as_str).unwrap_or("");
        match (kind, role) {
            ("text", _) => {
                ignored.content_keys(b, &field, TEXT_KEYS);
                texts.push(str_field(b, &field, "text")?.to_owned());
            }
            ("tool_use", Role::Assistant) => {
                let known = &["type", "id", "name", "input", "cache_control"];
                ignored.content_keys(b, &field, known);
                let input = b.get("input").cloned().unwrap_or_else(|| json!({}));
                if !input.is_object() {
                    return Err(ValidationError::invalid(
                        format!("{field}.input"),
                        "an object",
                    ));
                }
                calls.push(ToolCall {
                    id: str_field(b, &field, "id")?.to_owned(),
                    kind: "function".to_owned(),
                    function: FunctionCall {
                        name: str_field(b, &field, "name")?.to_owned(),
                        arguments: input.to_string(),
                    },
                });
            }
            ("tool_result", Role::User) => {
                let known = &[
                    "type",
                    "tool_use_id",
                    "content",
                    "is_error",
                    "cache_control",
                ];
                ignored.content_keys(b, &field, known);
                let id = str_field(b, &field, "tool_use_id")?;
                let content = match b.get("content") {
                    None | Some(Value::Null) => String::new(),
                    Some(c) => {
                        let c: BlockContent = serde_json::from_value(c.clone()).map_err(|_| {
                            ValidationError::invalid(
                                format!("{field}.content"),
                                "a string or a list of text blocks",
                            )
                        })?;
                        block_text(&c, &format!("{field}.content"), ignored)?
                    }
                };
                let mut m = ChatMessage::new(Role::Tool, content);
                m.tool_call_id = Some(id.to_owned());
                out.push(m);
            }
            ("tool_use" | "tool_result", _) => {
                return Err(ValidationError::rule(
                    format!("{field}.type"),
                    format!(
                        "a {kind:?} block belongs in a {} turn",
                        if kind == "tool_use" {
                            "assistant"
                        } else {
                            "user"
                        }
                    ),
                ));
            }
            (other, _) => {
                return Err(ValidationError::unsupported(
                    format!("{field}.type"),
                    format!(
                        "content blocks of type {other:?} are not supported; only \"text\", \"tool_use\" and \"tool_result\""
                    ),
                ));
            }
        }
    }
    if !texts.is_empty() || !calls.is_empty() {
        let mut m = ChatMessage::new(role, texts.join("\n"));
        if !calls.is_empty() {
            m.tool_calls = Some(calls);
        }
        out.push(m);
    } else if blocks.is_empty() {
        return Err(ValidationError::rule(
            format!("messages[{i}].content"),
            "a turn needs at least one content block",
        ));
    }
    Ok(())
}

/// The text of `system` or a tool result: a string, or text blocks joined with newlines.
fn block_text(
    c: &BlockContent,
    field: &str,
    ignored: &mut Ignored,
) -> Result<String, ValidationError> {
    match c {
        BlockContent::Text(t) => Ok(t.clone()),
        BlockContent::Blocks(blocks) => {
            let mut texts = Vec::with_capacity(blocks.len());
            for (j, b) in blocks.iter().enumerate() {
                let f = format!("{field}[{j}]");
                match b.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        ignored.content_keys(b, &f, TEXT_KEYS);
                        texts.push(str_field(b, &f, "text")?);
                    }
                    other => {
                        return Err(ValidationError::unsupported(
                            format!("{f}.type"),
                            format!("only \"text\" blocks are supported here, got {other:?}"),
                        ));
                    }
                }
            }
            Ok(texts.join("\n"))
        }
    }
}

/// Anthropic tools (`{"name", "description", "input_schema"}`) as chat tools.
pub fn chat_tools(
    tools: &[Map<String, Value>],
    ignored: &mut Ignored,
) -> Result<Value, ValidationError> {
    let mut out = Vec::with_capacity(tools.len());
    for (i, t) in tools.iter().enumerate() {
        let field = format!("tools[{i}]");
        match t.get("type").and_then(Value::as_str) {
            None | Some("custom") => {}
            Some(other) => {
                return Err(ValidationError::unsupported(
                    format!("{field}.type"),
                    format!("server tools such as {other:?} are not available; only client tools"),
                ));
            }
        }
        let known = &[
            "type",
            "name",
            "description",
            "input_schema",
            "cache_control",
            "strict",
        ];
        ignored.content_keys(t, &field, known);
        let schema = t
            .get("input_schema")
            .filter(|s| s.is_object())
            .ok_or_else(|| {
                ValidationError::invalid(format!("{field}.input_schema"), "a JSON schema object")
            })?;
        let mut f = Map::new();
        f.insert("name".into(), json!(str_field(t, &field, "name")?));
        if let Some(d) = t.get("description") {
            f.insert("description".into(), d.clone());
        }
        f.insert("parameters".into(), schema.clone());
        // Strict tool use: the call's input follows `input_schema` (`tools::ToolSetup`).
        if let Some(s) = t.get("strict").filter(|s| !s.is_null()) {
            f.insert("strict".into(), s.clone());
        }
        out.push(json!({"type": "function", "function": f}));
    }
    Ok(Value::Array(out))
}

/// Anthropic's `tool_choice` as chat's, and whether parallel calls are allowed.
pub fn chat_tool_choice(c: &Map<String, Value>) -> Result<(Value, bool), ValidationError> {
    field_policy::parameter_keys(
        c,
        "tool_choice",
        &["type", "name", "disable_parallel_tool_use"],
    )?;
    let parallel = !c
        .get("disable_parallel_tool_use")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let choice = match c.get("type").and_then(Value::as_str) {
        Some("auto") => json!("auto"),
        Some("any") => json!("required"),
        Some("none") => json!("none"),
        Some("tool") => {
            let name = str_field(c, "tool_choice", "name")?;
            json!({"type": "function", "function": {"name": name}})
        }
        other => {
            return Err(ValidationError::invalid_value(
                "tool_choice.type",
                "\"auto\", \"any\", \"tool\" or \"none\"",
                format!("{other:?}"),
            ));
        }
    };
    Ok((choice, parallel))
}

/// The message content of a chat message (for tests and callers that need the text back).
#[cfg(test)]
fn text_of(m: &ChatMessage) -> &str {
    match &m.content {
        Some(pagoda_protocol::MessageContent::Text(t)) => t,
        _ => "",
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn msgs(v: Value) -> Vec<AnthropicMessage> {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn blocks_become_chat_messages() {
        let system = BlockContent::Text("Be brief.".into());
        let m = msgs(json!([
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "18C"}]},
                {"type": "text", "text": "And?"}]}
        ]));
        let out = chat_messages(Some(&system), &m, &mut Ignored::default()).unwrap();
        let roles: Vec<Role> = out.iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            [
                Role::System,
                Role::User,
                Role::Assistant,
                Role::Tool,
                Role::User
            ]
        );
        let calls = out[2].tool_calls.as_ref().unwrap();
        assert_eq!(calls[0].function.arguments, r#"{"city":"Paris"}"#);
        assert_eq!(out[3].tool_call_id.as_deref(), Some("toolu_1"));
        assert_eq!(text_of(&out[3]), "18C");
    }

    #[test]
    fn unsupported_blocks_and_tools_are_named() {
        let m = msgs(json!([{"role": "user", "content": [{"type": "image", "source": {}}]}]));
        let e = chat_messages(None, &m, &mut Ignored::default()).unwrap_err();
        assert_eq!(e.field().as_deref(), Some("messages[0].content[0].type"));
        let t: Vec<Map<String, Value>> =
            serde_json::from_value(json!([{"type": "web_search_20250305", "name": "web_search"}]))
                .unwrap();
        assert_eq!(
            chat_tools(&t, &mut Ignored::default())
                .unwrap_err()
                .field()
                .as_deref(),
            Some("tools[0].type")
        );
        let c: Map<String, Value> =
            serde_json::from_value(json!({"type": "any", "disable_parallel_tool_use": true}))
                .unwrap();
        assert_eq!(chat_tool_choice(&c).unwrap(), (json!("required"), false));
    }
}
