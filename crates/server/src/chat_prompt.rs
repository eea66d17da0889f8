//! Chat messages -> prompt tokens: checks each message (roles, text-only content parts, no
//! unknown keys), renders the chat template over OpenAI-shaped JSON (with the request's
//! template variables, or the final message left open to continue), and tokenizes. Shared by
//! every chat-shaped API and `/tokenize`, so their token counts agree.

use pagoda_protocol::{ChatMessage, MessageContent, Role};
use serde_json::{Map, Value, json};

use crate::state::Loaded;
use crate::tools::ToolSetup;
use crate::validation_error::ValidationError;

/// How a conversation is rendered (vLLM's request fields).
#[derive(Clone, Copy, Debug)]
pub struct PromptOptions<'a> {
    /// End with the assistant-turn opener.
    pub add_generation_prompt: bool,
    /// Leave the final (assistant) message open: the reply continues it.
    pub continue_final_message: bool,
    /// Extra template variables (`chat_template_kwargs`).
    pub kwargs: Option<&'a Map<String, Value>>,
}

impl<'a> PromptOptions<'a> {
    /// A new assistant turn, the model's own template variables.
    pub const NEW_TURN: Self = Self {
        add_generation_prompt: true,
        continue_final_message: false,
        kwargs: None,
    };

    /// From the request's fields: `add_generation_prompt` defaults to true unless the final
    /// message is continued, and both at once are refused (as vLLM does).
    pub fn new(
        add_generation_prompt: Option<bool>,
        continue_final_message: Option<bool>,
        kwargs: Option<&'a Map<String, Value>>,
    ) -> Result<Self, ValidationError> {
        let continue_final = continue_final_message.unwrap_or(false);
        if continue_final && add_generation_prompt == Some(true) {
            return Err(ValidationError::Conflict {
                field: "continue_final_message",
                with: "`add_generation_prompt: true`",
            });
        }
        if let Some(k) = kwargs.and_then(|k| {
            k.keys().find(|k| {
                matches!(
                    k.as_str(),
                    "messages" | "tools" | "add_generation_prompt" | "bos_token" | "eos_token"
                )
            })
        }) {
            return Err(ValidationError::rule(
                format!("chat_template_kwargs.{k}"),
                format!("`{k}` is set by the request itself, not by `chat_template_kwargs`"),
            ));
        }
        Ok(Self {
            add_generation_prompt: add_generation_prompt.unwrap_or(!continue_final),
            continue_final_message: continue_final,
            kwargs: kwargs.filter(|k| !k.is_empty()),
        })
    }
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
    opts: &PromptOptions<'_>,
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
    let final_text = match (opts.continue_final_message, messages.last()) {
        (false, _) => None,
        (true, Some(m)) if m.role == Role::Assistant => {
            let text = m
                .content
                .as_ref()
                .map(|c| content_text(messages.len() - 1, c))
                .transpose()?
                .unwrap_or_default();
            if text.is_empty() {
                return Err(ValidationError::rule(
                    "continue_final_message",
                    "`continue_final_message` needs a final assistant message with text",
                ));
            }
            Some(text)
        }
        (true, _) => {
            return Err(ValidationError::rule(
                "continue_final_message",
                "`continue_final_message` needs the final message to be the assistant's",
            ));
        }
    };
    let messages_json = Value::Array(list);
    let no_kwargs = Map::new();
    let rendered = loaded
        .template
        .render_json_with(
            &messages_json,
            template_tools.as_ref(),
            opts.add_generation_prompt,
            opts.kwargs.unwrap_or(&no_kwargs),
        )
        .map_err(|e| {
            ValidationError::rule("messages", format!("cannot apply the chat template: {e}"))
        })?;
    match final_text {
        // Cut what the template writes after the final message (its end-of-turn), so the
        // reply continues the message (vLLM does the same).
        Some(text) => match rendered.rfind(&text) {
            Some(at) => Ok(rendered[..at + text.len()].to_owned()),
            None => Err(ValidationError::rule(
                "continue_final_message",
                "the chat template does not write the final message's text as given",
            )),
        },
        None => Ok(rendered),
    }
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
