//! Chat messages -> prompt text -> prompt tokens, the one home of that rule: each message is
//! checked (roles, text-only content parts; keys it does not know are left out, and listed by
//! [`unknown_keys`] for the caller to note) and handed to the chat template as
//! OpenAI-shaped JSON, the final message optionally left open, and the text tokenized with the
//! BOS rule. The server (every chat-shaped API and `/tokenize`), the router (its routing key)
//! and `pagoda generate --chat` call it, so their token counts agree.

use pagoda_protocol::{ChatMessage, MessageContent, Role};
use serde_json::{Map, Value, json};
use thiserror::Error;

use crate::{ChatTemplate, TemplateError, Tokenizer};

/// Why a conversation cannot become a prompt; `field` names the request field to blame.
#[derive(Debug, Error)]
pub enum PromptError {
    #[error("`messages` must not be empty")]
    NoMessages,
    #[error("a text part needs a `text` string")]
    TextPart { field: String },
    #[error("content parts of type {kind:?} are not supported; only \"text\"")]
    PartType { field: String, kind: String },
    #[error("a {role} message needs `content`")]
    NoContent { field: String, role: &'static str },
    #[error("only assistant messages carry `tool_calls`")]
    ToolCallsNotAssistant { field: String },
    #[error("a tool message needs `tool_call_id`")]
    NoToolCallId { field: String },
    #[error("`continue_final_message` cannot be set with `add_generation_prompt: true`")]
    ContinueWithGenerationPrompt,
    #[error("`{key}` is set by the request itself, not by `chat_template_kwargs`")]
    ReservedKwarg { key: String },
    #[error("`continue_final_message` needs a final assistant message with text")]
    ContinueEmpty,
    #[error("`continue_final_message` needs the final message to be the assistant's")]
    ContinueNotAssistant,
    #[error("the chat template does not write the final message's text as given")]
    ContinueNotWritten,
    #[error("cannot apply the chat template: {0}")]
    Template(#[from] TemplateError),
}

impl PromptError {
    /// The request field the refusal is about, as the client spelled it.
    pub fn field(&self) -> String {
        match self {
            Self::NoMessages | Self::Template(_) => "messages".into(),
            Self::TextPart { field }
            | Self::PartType { field, .. }
            | Self::NoContent { field, .. }
            | Self::ToolCallsNotAssistant { field }
            | Self::NoToolCallId { field } => field.clone(),
            Self::ContinueWithGenerationPrompt
            | Self::ContinueEmpty
            | Self::ContinueNotAssistant
            | Self::ContinueNotWritten => "continue_final_message".into(),
            Self::ReservedKwarg { key } => format!("chat_template_kwargs.{key}"),
        }
    }
}

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
    ) -> Result<Self, PromptError> {
        let continue_final = continue_final_message.unwrap_or(false);
        if continue_final && add_generation_prompt == Some(true) {
            return Err(PromptError::ContinueWithGenerationPrompt);
        }
        if let Some(k) = kwargs.and_then(|k| {
            k.keys().find(|k| {
                matches!(
                    k.as_str(),
                    "messages" | "tools" | "add_generation_prompt" | "bos_token" | "eos_token"
                )
            })
        }) {
            return Err(PromptError::ReservedKwarg { key: k.clone() });
        }
        Ok(Self {
            add_generation_prompt: add_generation_prompt.unwrap_or(!continue_final),
            continue_final_message: continue_final,
            kwargs: kwargs.filter(|k| !k.is_empty()),
        })
    }
}

/// How the request's tools reach the template: as its `tools` variable, or written into the
/// messages (a system-prompt section for templates that ignore `tools`). The server's tool
/// setup decides; a plain JSON tool list goes in as the variable.
pub trait TemplateTools {
    /// The messages as the template should see them.
    fn adapt_messages(&self, messages: Vec<Value>) -> Vec<Value>;
    /// The template's `tools` variable, or `None` when the tools are in the messages.
    fn template_tools(&self) -> Option<Value>;
}

impl TemplateTools for Value {
    fn adapt_messages(&self, messages: Vec<Value>) -> Vec<Value> {
        messages
    }

    fn template_tools(&self) -> Option<Value> {
        Some(self.clone())
    }
}

/// The rendered prompt text.
pub fn render(
    template: &ChatTemplate,
    messages: &[ChatMessage],
    opts: &PromptOptions<'_>,
    tools: Option<&dyn TemplateTools>,
) -> Result<String, PromptError> {
    if messages.is_empty() {
        return Err(PromptError::NoMessages);
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
                return Err(PromptError::ContinueEmpty);
            }
            Some(text)
        }
        (true, _) => return Err(PromptError::ContinueNotAssistant),
    };
    let no_kwargs = Map::new();
    let rendered = template.render_json_with(
        &Value::Array(list),
        template_tools.as_ref(),
        opts.add_generation_prompt,
        opts.kwargs.unwrap_or(&no_kwargs),
    )?;
    match final_text {
        // Cut what the template writes after the final message (its end-of-turn), so the
        // reply continues the message (vLLM does the same).
        Some(text) => match rendered.rfind(&text) {
            Some(at) => Ok(rendered[..at + text.len()].to_owned()),
            None => Err(PromptError::ContinueNotWritten),
        },
        None => Ok(rendered),
    }
}

/// The rendered prompt's tokens. Unless the request says, special tokens (BOS) are added only
/// when the template did not already write the BOS text, so a prompt never starts with two.
pub fn tokenize(tokenizer: &Tokenizer, text: &str, add_special_tokens: Option<bool>) -> Vec<u32> {
    let add_special = add_special_tokens.unwrap_or_else(|| {
        let bos_text = tokenizer
            .bos_id()
            .map(|id| tokenizer.token_to_piece(id))
            .unwrap_or("");
        bos_text.is_empty() || !text.starts_with(bos_text)
    });
    tokenizer.encode(text, add_special, true)
}

/// The text of a message's content: a string, or its text parts joined with newlines (vLLM's
/// "string" content format).
pub fn content_text(i: usize, content: &MessageContent) -> Result<String, PromptError> {
    match content {
        MessageContent::Text(t) => Ok(t.clone()),
        MessageContent::Parts(parts) => {
            let mut texts = Vec::with_capacity(parts.len());
            for (j, p) in parts.iter().enumerate() {
                match (p.kind.as_str(), &p.text) {
                    ("text", Some(t)) => texts.push(t.as_str()),
                    ("text", _) => {
                        return Err(PromptError::TextPart {
                            field: format!("messages[{i}].content[{j}]"),
                        });
                    }
                    (other, _) => {
                        return Err(PromptError::PartType {
                            field: format!("messages[{i}].content[{j}].type"),
                            kind: other.to_owned(),
                        });
                    }
                }
            }
            Ok(texts.join("\n"))
        }
    }
}

/// The keys of `messages` (and of their content parts) this rule does not read, as paths
/// (a `null` is as good as absent)
/// (`messages[1].provider_specific_fields`): clients add their own bookkeeping there (litellm
/// replays an assistant turn with it), and it never reaches the template.
pub fn unknown_keys(messages: &[ChatMessage]) -> Vec<String> {
    let set = |m: &Map<String, Value>| -> Vec<String> {
        m.iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, _)| k.clone())
            .collect()
    };
    let mut out = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        out.extend(
            set(&m.extra)
                .into_iter()
                .map(|k| format!("messages[{i}].{k}")),
        );
        if let Some(MessageContent::Parts(parts)) = &m.content {
            for (j, p) in parts.iter().enumerate() {
                if p.kind == "text" {
                    let keys = set(&p.extra).into_iter();
                    out.extend(keys.map(|k| format!("messages[{i}].content[{j}].{k}")));
                }
            }
        }
    }
    out
}

/// One message as the template sees it, after the checks every API shares.
fn message_json(i: usize, m: &ChatMessage) -> Result<Value, PromptError> {
    let content = match &m.content {
        Some(c) => content_text(i, c)?,
        None if m.role == Role::Assistant && m.tool_calls.is_some() => String::new(),
        None => {
            return Err(PromptError::NoContent {
                field: format!("messages[{i}].content"),
                role: m.role.as_str(),
            });
        }
    };
    if m.tool_calls.is_some() && m.role != Role::Assistant {
        return Err(PromptError::ToolCallsNotAssistant {
            field: format!("messages[{i}].tool_calls"),
        });
    }
    if m.role == Role::Tool && m.tool_call_id.is_none() {
        return Err(PromptError::NoToolCallId {
            field: format!("messages[{i}].tool_call_id"),
        });
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
