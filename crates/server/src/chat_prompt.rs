//! Chat messages -> prompt tokens: checks each message (roles, text-only content parts, no
//! unknown keys), renders the chat template over OpenAI-shaped JSON, and tokenizes. Shared by
//! `/v1/chat/completions` and `/tokenize`, so their token counts agree.

use pagoda_protocol::{ChatMessage, MessageContent, Role};
use serde_json::{Map, Value, json};

use crate::state::Loaded;
use crate::tools::ToolSetup;
use crate::validation_error::ValidationError;

/// The prompt tokens of `messages`. `add_special_tokens: None` adds the BOS only when the
/// template did not already write it (HF templates that start with `{{ bos_token }}` do).
pub fn chat_prompt(
    loaded: &Loaded,
    messages: &[ChatMessage],
    add_generation_prompt: bool,
    add_special_tokens: Option<bool>,
) -> Result<Vec<u32>, ValidationError> {
    let text = render(loaded, messages, add_generation_prompt, None)?;
    Ok(tokenize(loaded, &text, add_special_tokens))
}

/// The rendered prompt's tokens.
pub fn tokenize(loaded: &Loaded, text: &str, add_special_tokens: Option<bool>) -> Vec<u32> {
    let tok = &loaded.tokenizer;
    let add_special = add_special_tokens.unwrap_or_else(|| {
        let bos_text = tok.bos_id().map(|id| tok.token_to_piece(id)).unwrap_or("");
        bos_text.is_empty() || !text.starts_with(bos_text)
    });
    tok.encode(text, add_special, true)
}

/// The rendered prompt text.
pub fn render(
    loaded: &Loaded,
    messages: &[ChatMessage],
    add_generation_prompt: bool,
    tools: Option<&ToolSetup>,
) -> Result<String, ValidationError> {
    if messages.is_empty() {
        return Err(ValidationError::rule(
            "messages",
            "`messages` must not be empty",
        ));
    }
    let list: Vec<Value> = messages
        .iter()
        .enumerate()
        .map(|(i, m)| message_json(i, m))
        .collect::<Result<_, _>>()?;
    let (list, template_tools) = match tools {
        Some(t) => (t.adapt_messages(list), t.template_tools()),
        None => (list, None),
    };
    loaded
        .template
        .render_json(
            &Value::Array(list),
            template_tools.as_ref(),
            add_generation_prompt,
        )
        .map_err(|e| {
            ValidationError::rule("messages", format!("cannot apply the chat template: {e}"))
        })
}

/// The text of a message's content: a string, or its text parts joined with newlines (vLLM's
/// "string" content format).
pub fn content_text(i: usize, content: &MessageContent) -> Result<String, ValidationError> {
    match content {
        MessageContent::Text(t) => Ok(t.clone()),
        MessageContent::Parts(parts) => {
            let mut texts = Vec::with_capacity(parts.len());
            for (j, p) in parts.iter().enumerate() {
                match (p.kind.as_str(), &p.text) {
                    ("text", Some(t)) if p.extra.is_empty() => texts.push(t.as_str()),
                    ("text", _) => {
                        return Err(ValidationError::rule(
                            format!("messages[{i}].content[{j}]"),
                            "a text part needs a `text` string and nothing else",
                        ));
                    }
                    (other, _) => {
                        return Err(ValidationError::unsupported(
                            format!("messages[{i}].content[{j}].type"),
                            format!(
                                "content parts of type {other:?} are not supported; only \"text\""
                            ),
                        ));
                    }
                }
            }
            Ok(texts.join("\n"))
        }
    }
}

fn message_json(i: usize, m: &ChatMessage) -> Result<Value, ValidationError> {
    if let Some(k) = m.extra.keys().next() {
        return Err(ValidationError::unknown(format!("messages[{i}].{k}")));
    }
    let content = match &m.content {
        Some(c) => content_text(i, c)?,
        None if m.role == Role::Assistant && m.tool_calls.is_some() => String::new(),
        None => {
            return Err(ValidationError::rule(
                format!("messages[{i}].content"),
                format!("a {} message needs `content`", m.role.as_str()),
            ));
        }
    };
    if m.tool_calls.is_some() && m.role != Role::Assistant {
        return Err(ValidationError::rule(
            format!("messages[{i}].tool_calls"),
            "only assistant messages carry `tool_calls`",
        ));
    }
    if m.role == Role::Tool && m.tool_call_id.is_none() {
        return Err(ValidationError::rule(
            format!("messages[{i}].tool_call_id"),
            "a tool message needs `tool_call_id`",
        ));
    }
    let mut obj = Map::new();
    obj.insert("role".into(), json!(m.role.as_str()));
    obj.insert("content".into(), json!(content));
    if let Some(name) = &m.name {
        obj.insert("name".into(), json!(name));
    }
    if let Some(calls) = &m.tool_calls {
        // As vLLM hands them to templates: `arguments` as an object when it parses (Qwen 2.5's
        // template writes `tool_call.arguments | tojson`, which would quote a string again).
        let list: Vec<Value> = calls
            .iter()
            .map(|c| {
                let args = serde_json::from_str::<Value>(&c.function.arguments)
                    .unwrap_or_else(|_| json!(c.function.arguments));
                json!({"id": c.id, "type": c.kind,
                       "function": {"name": c.function.name, "arguments": args}})
            })
            .collect();
        obj.insert("tool_calls".into(), Value::Array(list));
    }
    if let Some(id) = &m.tool_call_id {
        obj.insert("tool_call_id".into(), json!(id));
    }
    if let Some(r) = &m.reasoning_content {
        obj.insert("reasoning_content".into(), json!(r));
    }
    Ok(Value::Object(obj))
}
