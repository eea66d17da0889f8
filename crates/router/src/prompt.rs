//! The prompt's token ids as a replica computes them, from the same GGUF (vocabulary and chat
//! template only, no weights): chat messages by the replicas' own rule in
//! `pagoda_frontend::chat_prompt`, completions prompts encoded as the server's
//! `api/openai/completions.rs` does. Lenient: a request the router cannot tokenize has no
//! routing key and goes by load (the replica judges it); keys a client adds to messages are left
//! out, as the replica leaves them out.

use std::path::Path;

use pagoda_frontend::chat_prompt::{self, PromptOptions, TemplateTools};
use pagoda_frontend::{ChatTemplate, Tokenizer};
use pagoda_protocol::ChatMessage;
use serde_json::Value;

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

    /// A `/v1/chat/completions` body's prompt: the replicas' own rule
    /// (`pagoda_frontend::chat_prompt`) over its messages; `None` where a replica would refuse.
    pub fn chat_tokens(&self, body: &Value) -> Option<Vec<u32>> {
        let messages: Vec<ChatMessage> =
            serde_json::from_value(body.get("messages")?.clone()).ok()?;
        let tools = match body.get("tools") {
            None | Some(Value::Null) => None,
            // Tools injected into the messages (templates without `tools`) are the server's
            // business; routing by load is the honest fallback.
            Some(_) if !self.template.renders_tools() => return None,
            Some(t) => Some(t as &dyn TemplateTools),
        };
        let flag = |key| body.get(key).and_then(Value::as_bool);
        let kwargs = body.get("chat_template_kwargs").and_then(Value::as_object);
        let opts = PromptOptions::new(
            flag("add_generation_prompt"),
            flag("continue_final_message"),
            kwargs,
        )
        .ok()?;
        let text = chat_prompt::render(&self.template, &messages, &opts, tools).ok()?;
        Some(chat_prompt::tokenize(
            &self.tokenizer,
            &text,
            flag("add_special_tokens"),
        ))
    }
}

fn ids(v: &Value) -> Option<Vec<u32>> {
    v.as_array()?
        .iter()
        .map(|t| t.as_u64().and_then(|t| u32::try_from(t).ok()))
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use pagoda_testkit::tiny_model::TinyModel;
    use serde_json::json;

    use super::*;

    /// Keys a client adds to messages (litellm's replayed assistant turn, a part's cache hint)
    /// do not cost the routing key: the prompt is the one without them, as the replica renders.
    #[test]
    fn unknown_message_keys_keep_the_routing_key() {
        let path = std::env::temp_dir().join(format!("router-prompt-{}.gguf", std::process::id()));
        std::fs::write(&path, TinyModel::llama().to_bytes()).unwrap();
        let tok = PromptTokenizer::open(&path, None).unwrap();
        let _ = std::fs::remove_file(&path);
        let plain = json!({"messages": [
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {"role": "assistant", "content": "hello"},
            {"role": "user", "content": "bye"}]});
        let extra = json!({"messages": [
            {"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]},
            {"role": "assistant", "content": "hello", "provider_specific_fields": {"refusal": null}},
            {"role": "user", "content": "bye"}]});
        let want = tok.chat_tokens(&plain).unwrap();
        assert_eq!(tok.chat_tokens(&extra), Some(want));
    }
}
