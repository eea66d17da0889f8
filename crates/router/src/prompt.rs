//! The prompt's token ids as a replica computes them, from the same GGUF (vocabulary and chat
//! template only, no weights): chat messages rendered as `server/src/chat_prompt.rs` renders
//! them, completions prompts encoded as `routes/completions.rs` does. Lenient: a request the
//! router cannot tokenize has no routing key and goes by load (the replica judges it).

use std::path::Path;

use pagoda_frontend::{ChatTemplate, Tokenizer};
use serde_json::{Map, Value, json};

use crate::error::ConfigError;

/// The tokenizer and chat template of the model the replicas serve.
pub struct PromptTokenizer {
    tokenizer: Tokenizer,
    template: ChatTemplate,
}

impl PromptTokenizer {
    /// Reads the GGUF's metadata (the file is mapped; no tensor is read).
    pub fn open(path: &Path, chat_template: Option<&str>) -> Result<Self, ConfigError> {
        let e =
            |e: &dyn std::fmt::Display| ConfigError::Tokenizer(format!("{}: {e}", path.display()));
        let file = pagoda_gguf::GgufFile::open(path).map_err(|x| e(&x))?;
        let tokenizer = Tokenizer::from_gguf(&file).map_err(|x| e(&x))?;
        let template = ChatTemplate::from_gguf(&file, chat_template).map_err(|x| e(&x))?;
        Ok(Self {
            tokenizer,
            template,
        })
    }

    /// A `/v1/completions` body's (first) prompt.
    pub fn completion_tokens(&self, body: &Value) -> Option<Vec<u32>> {
        let add_special = body
            .get("add_special_tokens")
            .and_then(Value::as_bool)
            .unwrap_or(true);
        let prompt = body.get("prompt")?;
        let first = match prompt {
            Value::Array(items) => items.first()?,
            p => p,
        };
        match first {
            Value::String(t) => Some(self.tokenizer.encode(t, add_special, true)),
            Value::Number(_) => ids(prompt),
            Value::Array(_) => ids(first),
            _ => None,
        }
    }

    /// A `/v1/chat/completions` body's prompt: the template over its messages.
    pub fn chat_tokens(&self, body: &Value) -> Option<Vec<u32>> {
        let messages = body.get("messages")?.as_array()?;
        let list: Vec<Value> = messages.iter().map(message_json).collect::<Option<_>>()?;
        let tools = match body.get("tools") {
            None | Some(Value::Null) => None,
            // Tools injected into the messages (templates without `tools`) are the server's
            // business; routing by load is the honest fallback.
            Some(_) if !self.template.renders_tools() => return None,
            Some(t) => Some(t),
        };
        let continue_final = body
            .get("continue_final_message")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let add_generation_prompt = body
            .get("add_generation_prompt")
            .and_then(Value::as_bool)
            .unwrap_or(!continue_final);
        let no_kwargs = Map::new();
        let kwargs = body
            .get("chat_template_kwargs")
            .and_then(Value::as_object)
            .unwrap_or(&no_kwargs);
        let mut text = self
            .template
            .render_json_with(&Value::Array(list), tools, add_generation_prompt, kwargs)
            .ok()?;
        if continue_final {
            let last = messages.last()?.get("content")?.as_str()?;
            let at = text.rfind(last)?;
            text.truncate(at + last.len());
        }
        let tok = &self.tokenizer;
        let add_special = body
            .get("add_special_tokens")
            .and_then(Value::as_bool)
            .unwrap_or_else(|| {
                let bos = tok.bos_id().map(|id| tok.token_to_piece(id)).unwrap_or("");
                bos.is_empty() || !text.starts_with(bos)
            });
        Some(tok.encode(&text, add_special, true))
    }
}

fn ids(v: &Value) -> Option<Vec<u32>> {
    v.as_array()?
        .iter()
        .map(|t| t.as_u64().and_then(|t| u32::try_from(t).ok()))
        .collect()
}

/// One message as `chat_prompt.rs::message_json` hands it to the template.
fn message_json(m: &Value) -> Option<Value> {
    let role = m.get("role")?.as_str()?;
    let content = match m.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Option<Vec<_>>>()?
            .join("\n"),
        None | Some(Value::Null) => String::new(),
        Some(_) => return None,
    };
    let mut obj = Map::new();
    obj.insert("role".into(), json!(role));
    obj.insert("content".into(), json!(content));
    if let Some(name) = m.get("name") {
        obj.insert("name".into(), name.clone());
    }
    if let Some(calls) = m.get("tool_calls").and_then(Value::as_array) {
        let list: Vec<Value> = calls
            .iter()
            .map(|c| {
                let f = c.get("function").cloned().unwrap_or(Value::Null);
                let args = f.get("arguments").cloned().unwrap_or(Value::Null);
                let args = args
                    .as_str()
                    .and_then(|s| serde_json::from_str::<Value>(s).ok())
                    .unwrap_or(args);
                json!({"id": c.get("id"), "type": c.get("type"),
                       "function": {"name": f.get("name"), "arguments": args}})
            })
            .collect();
        obj.insert("tool_calls".into(), Value::Array(list));
    }
    for key in ["tool_call_id", "reasoning_content"] {
        if let Some(v) = m.get(key) {
            obj.insert(key.into(), v.clone());
        }
    }
    Some(Value::Object(obj))
}
