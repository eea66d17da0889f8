//! Chat templates: renders a conversation to the prompt text with minijinja set up to match
//! transformers' jinja2 environment (trim_blocks, lstrip_blocks, Python string methods,
//! `raise_exception`, `strftime_now`, Python-style `tojson`).

use std::fmt;

use minijinja::syntax::SyntaxConfig;
use minijinja::value::{Kwargs, Serde, Value};
use minijinja::{Environment, Error, ErrorKind};
use serde::{Deserialize, Serialize};

use crate::error::TemplateError;
use crate::template_source::TemplateSource;

/// The work one render may do, in minijinja's fuel: an instruction costs one, and 64 bytes of
/// output or of values made cost one, so this bounds a render to ~2M instructions and ~128 MB
/// of data (well under a second); Qwen 2.5's template renders a 5,000-message conversation with
/// 50 tools inside it (crates/frontend/tests/template_limits.rs).
const RENDER_FUEL: u64 = 2_000_000;

/// One message of a conversation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

impl ChatMessage {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// Gemma's standard turn format (the HF gemma-3 template) without its leading `{{ bos_token }}`:
/// llama.cpp's built-in `gemma` template emits no BOS text and the tokenizer adds the BOS
/// (add_bos_token = true), so the prompt tokens start with exactly one BOS (llama-chat.cpp
/// LLM_CHAT_TEMPLATE_GEMMA; /work/shared/golden gemma3 `chat_templated_prompt`).
const GEMMA_TEMPLATE: &str = r#"{%- if messages[0]['role'] == 'system' -%}
    {%- set first_user_prefix = messages[0]['content'] | trim + '\n\n' -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if message['role'] == 'assistant' -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {{- message['content'] | trim }}
    {{- '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{ '<start_of_turn>model\n' }}
{%- endif -%}
"#;

/// llama.cpp's ChatML (llama-chat.cpp LLM_CHAT_TEMPLATE_CHATML).
const CHATML_TEMPLATE: &str = r#"{%- for message in messages -%}
    {{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|im_start|>assistant\n' -}}
{%- endif -%}
"#;

const NAME: &str = "chat";

/// A compiled chat template.
pub struct ChatTemplate {
    env: Environment<'static>,
    source: TemplateSource,
    bos_token: String,
    eos_token: String,
    /// The template's source text (parsers are chosen by what it mentions).
    text: String,
    /// Whether rendering with `tools` puts them in the prompt (SmolLM2's template ignores them).
    renders_tools: bool,
}

impl fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl ChatTemplate {
    /// Picks the template: `user_template` if given, else the file's `tokenizer.chat_template`,
    /// else a built-in keyed on `general.architecture` (Gemma), else ChatML.
    pub fn from_gguf(
        file: &pagoda_gguf::GgufFile,
        user_template: Option<&str>,
    ) -> Result<Self, TemplateError> {
        let e = |e: pagoda_gguf::GgufError| TemplateError::Gguf(e.to_string());
        let tokens = file
            .get_str_array("tokenizer.ggml.tokens")
            .map_err(e)?
            .unwrap_or(&[]);
        let text_of = |key: &str| -> Result<String, TemplateError> {
            Ok(file
                .get_u32(key)
                .map_err(e)?
                .and_then(|id| tokens.get(id as usize))
                .cloned()
                .unwrap_or_default())
        };
        let bos = text_of("tokenizer.ggml.bos_token_id")?;
        let eos = text_of("tokenizer.ggml.eos_token_id")?;
        let file_template = file.get_str("tokenizer.chat_template").map_err(e)?;
        let architecture = file.architecture().map_err(e)?;
        Self::select(user_template, file_template, architecture, &bos, &eos)
    }

    /// The selection of [`ChatTemplate::from_gguf`] over plain values.
    pub fn select(
        user_template: Option<&str>,
        file_template: Option<&str>,
        architecture: &str,
        bos_token: &str,
        eos_token: &str,
    ) -> Result<Self, TemplateError> {
        let (text, source) = match (user_template, file_template) {
            (Some(t), _) => (t, TemplateSource::User),
            (None, Some(t)) if !t.trim().is_empty() => (t, TemplateSource::Gguf),
            _ if architecture.starts_with("gemma") => {
                (GEMMA_TEMPLATE, TemplateSource::BuiltinGemma)
            }
            _ => (CHATML_TEMPLATE, TemplateSource::ChatMl),
        };
        Self::new(text, source, bos_token, eos_token)
    }

    /// Compiles `template` with the transformers-compatible environment.
    pub fn new(
        template: &str,
        source: TemplateSource,
        bos_token: &str,
        eos_token: &str,
    ) -> Result<Self, TemplateError> {
        let mut env = Environment::new();
        // transformers renders with jinja2 trim_blocks + lstrip_blocks (chat_template_utils.py);
        // minijinja 3 takes them through SyntaxConfig.
        let syntax = SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(|err| TemplateError::Compile {
                source_kind: source,
                message: describe(&err),
            })?;
        env.set_syntax(syntax);
        // A template comes from a model file anyone may have written: every render gets a budget
        // (minijinja also caps recursion at 500 levels), so a loop, a recursion or an output
        // that never ends is a render error instead of a hung or exhausted worker.
        env.set_fuel(Some(RENDER_FUEL));
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", |format: String| {
            crate::strftime::now(&format)
        });
        env.add_filter("tojson", tojson);
        env.add_template_owned(NAME, template.to_string())
            .map_err(|err| TemplateError::Compile {
                source_kind: source,
                message: describe(&err),
            })?;
        let mut t = Self {
            env,
            source,
            bos_token: bos_token.to_string(),
            eos_token: eos_token.to_string(),
            text: template.to_string(),
            renders_tools: false,
        };
        t.renders_tools = t.probe_tools();
        Ok(t)
    }

    /// Renders a one-message conversation with and without a tool of a unique name: the
    /// template uses `tools` iff the name shows up (a template that fails either way gets
    /// the generic format).
    fn probe_tools(&self) -> bool {
        const PROBE: &str = "pagoda_probe_tool_q7x";
        let messages = serde_json::json!([{"role": "user", "content": "Hi"}]);
        let tools = serde_json::json!([{"type": "function", "function": {
            "name": PROBE, "description": "probe",
            "parameters": {"type": "object", "properties": {}}}}]);
        let with = self.render_json(&messages, Some(&tools), true);
        matches!(with, Ok(text) if text.contains(PROBE))
    }

    /// The template's source text.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Whether the template renders the `tools` variable; when it does not, tool definitions
    /// must be injected into the messages (see `tool_calls::generic_system_prompt`).
    pub fn renders_tools(&self) -> bool {
        self.renders_tools
    }

    /// Which template is in use.
    pub fn source(&self) -> TemplateSource {
        self.source
    }

    /// Renders `messages`, ending with the assistant-turn opener if `add_generation_prompt`.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String, TemplateError> {
        self.render_value(Value::from(Serde(messages)), None, add_generation_prompt)
    }

    /// Renders OpenAI-shaped JSON messages (content parts, `tool_calls`, ...) and optional tools,
    /// key order preserved.
    pub fn render_json(
        &self,
        messages: &serde_json::Value,
        tools: Option<&serde_json::Value>,
        add_generation_prompt: bool,
    ) -> Result<String, TemplateError> {
        self.render_value(
            Value::from(Serde(messages)),
            tools.map(|t| Value::from(Serde(t))),
            add_generation_prompt,
        )
    }

    /// [`ChatTemplate::render_json`] with extra template variables (vLLM's
    /// `chat_template_kwargs`, e.g. `enable_thinking`); they never replace the standard ones
    /// (`messages`, `tools`, `add_generation_prompt`, `bos_token`, `eos_token`).
    pub fn render_json_with(
        &self,
        messages: &serde_json::Value,
        tools: Option<&serde_json::Value>,
        add_generation_prompt: bool,
        extra: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<String, TemplateError> {
        self.render_full(
            Value::from(Serde(messages)),
            tools.map(|t| Value::from(Serde(t))),
            add_generation_prompt,
            Value::from(Serde(extra)),
        )
    }

    fn render_value(
        &self,
        messages: Value,
        tools: Option<Value>,
        add_generation_prompt: bool,
    ) -> Result<String, TemplateError> {
        self.render_full(
            messages,
            tools,
            add_generation_prompt,
            Value::from(Serde(serde_json::Map::new())),
        )
    }

    fn render_full(
        &self,
        messages: Value,
        tools: Option<Value>,
        add_generation_prompt: bool,
        extra: Value,
    ) -> Result<String, TemplateError> {
        let err = |e: Error| TemplateError::Render {
            source_kind: self.source,
            message: describe(&e),
        };
        let template = self.env.get_template(NAME).map_err(err)?;
        let ctx = minijinja::context! {
            messages => messages,
            tools => tools,
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos_token.as_str(),
            eos_token => self.eos_token.as_str(),
            ..extra
        };
        template.render(ctx).map_err(err)
    }
}

/// The error with its chain of causes, which minijinja keeps separately.
fn describe(e: &Error) -> String {
    let mut s = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cause = c.source();
    }
    s
}

fn raise_exception(message: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message))
}

/// jinja2's `tojson` as transformers defines it: `json.dumps(x, ensure_ascii=False, indent=...,
/// sort_keys=...)`, with Python's separators (", " and ": ") and no HTML escaping (minijinja's
/// built-in escapes `<>&'`).
fn tojson(value: &Value, args: Kwargs) -> Result<Value, Error> {
    let indent: Option<Value> = args.get("indent")?;
    let sort_keys: Option<bool> = args.get("sort_keys")?;
    let _ensure_ascii: Option<bool> = args.get("ensure_ascii")?;
    args.assert_all_used()?;
    let indent = match indent {
        Some(v) if v.is_none() || v.is_undefined() => None,
        Some(v) => Some(usize::try_from(v)?),
        None => None,
    };
    let json = serde_json::to_value(value).map_err(|e| {
        Error::new(
            ErrorKind::InvalidOperation,
            "tojson: value cannot be serialized",
        )
        .with_source(e)
    })?;
    let mut out = String::new();
    write_python_json(&json, indent, sort_keys.unwrap_or(false), 0, &mut out);
    Ok(Value::from_safe_string(out))
}

fn write_python_json(
    v: &serde_json::Value,
    indent: Option<usize>,
    sort_keys: bool,
    depth: usize,
    out: &mut String,
) {
    use serde_json::Value as J;
    let newline = |out: &mut String, depth: usize| {
        if let Some(n) = indent {
            out.push('\n');
            out.extend(std::iter::repeat_n(' ', n * depth));
        }
    };
    // json.dumps: item separator ", " without indent, "," with it; key separator ": ".
    let item_sep = if indent.is_some() { "," } else { ", " };
    match v {
        J::Array(items) if !items.is_empty() => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(out, depth + 1);
                write_python_json(item, indent, sort_keys, depth + 1, out);
            }
            newline(out, depth);
            out.push(']');
        }
        J::Object(map) if !map.is_empty() => {
            let mut entries: Vec<_> = map.iter().collect();
            if sort_keys {
                entries.sort_by(|a, b| a.0.cmp(b.0));
            }
            out.push('{');
            for (i, (k, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(out, depth + 1);
                out.push_str(&J::String(k.clone()).to_string());
                out.push_str(": ");
                write_python_json(item, indent, sort_keys, depth + 1, out);
            }
            newline(out, depth);
            out.push('}');
        }
        // Scalars and empty containers: serde_json escapes strings as json.dumps does with
        // ensure_ascii=False (control characters only).
        other => out.push_str(&other.to_string()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn render(template: &str, messages: &[ChatMessage]) -> Result<String, TemplateError> {
        ChatTemplate::new(template, TemplateSource::User, "<s>", "</s>")?.render(messages, true)
    }

    #[test]
    fn extra_variables_reach_the_template_but_never_replace_the_standard_ones() {
        let t = ChatTemplate::new(
            "{{ enable_thinking }}/{{ messages | length }}/{{ add_generation_prompt }}",
            TemplateSource::User,
            "",
            "",
        )
        .unwrap();
        let msgs = serde_json::json!([{"role": "user", "content": "Hi"}]);
        let extra = serde_json::json!({"enable_thinking": false, "messages": [1, 2, 3]});
        let out = t
            .render_json_with(&msgs, None, true, extra.as_object().unwrap())
            .unwrap();
        assert_eq!(out, "False/1/True", "Python spelling, as jinja2 writes it");
    }

    #[test]
    fn tojson_uses_python_separators_and_no_html_escaping() {
        let x = serde_json::json!({"b": "<a&b>'", "a": [1, 2.5, null, true], "e": {}});
        let t2 =
            ChatTemplate::new("{{ messages | tojson }}", TemplateSource::User, "", "").unwrap();
        assert_eq!(
            t2.render_json(&x, None, false).unwrap(),
            r#"{"b": "<a&b>'", "a": [1, 2.5, null, true], "e": {}}"#
        );
        let t3 = ChatTemplate::new(
            "{{ messages | tojson(indent=2) }}",
            TemplateSource::User,
            "",
            "",
        )
        .unwrap();
        assert_eq!(
            t3.render_json(&serde_json::json!({"k": [1, "é"]}), None, false)
                .unwrap(),
            "{\n  \"k\": [\n    1,\n    \"é\"\n  ]\n}"
        );
    }

    #[test]
    fn python_methods_and_trim_blocks() {
        let tpl = "{% for m in messages %}\n  {% if m.content.startswith('x') %}{{ m.content.upper() }}{% endif %}\n{% endfor %}";
        let out = render(
            tpl,
            &[
                ChatMessage::new("user", "xy"),
                ChatMessage::new("user", "ab"),
            ],
        )
        .unwrap();
        // What jinja2 renders with trim_blocks + lstrip_blocks.
        assert_eq!(out, "XY");
    }

    #[test]
    fn raise_exception_is_an_error_not_a_panic() {
        let err = render("{{ raise_exception('no system role') }}", &[]).unwrap_err();
        assert!(err.to_string().contains("no system role"), "{err}");
        assert!(ChatTemplate::new("{% for %}", TemplateSource::User, "", "").is_err());
    }

    #[test]
    fn gemma_builtin_merges_system_and_maps_roles() {
        let t = ChatTemplate::select(None, None, "gemma3", "<bos>", "<eos>").unwrap();
        assert_eq!(t.source(), TemplateSource::BuiltinGemma);
        let out = t
            .render(
                &[
                    ChatMessage::new("system", "Be brief."),
                    ChatMessage::new("user", " Hi \n"),
                    ChatMessage::new("assistant", "Hello!"),
                    ChatMessage::new("user", "Bye"),
                ],
                true,
            )
            .unwrap();
        assert_eq!(
            out,
            "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n\
             <start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n"
        );
        let bad = t.render(&[ChatMessage::new("assistant", "x")], false);
        assert!(matches!(bad, Err(TemplateError::Render { .. })));
    }

    #[test]
    fn chatml_fallback_and_user_override() {
        let t = ChatTemplate::select(None, None, "llama", "", "").unwrap();
        assert_eq!(t.source(), TemplateSource::ChatMl);
        assert_eq!(
            t.render(&[ChatMessage::new("user", "Hi")], true).unwrap(),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
        let u = ChatTemplate::select(
            Some("{{ bos_token }}{{ messages[0].content }}"),
            Some("x"),
            "gemma3",
            "<s>",
            "",
        )
        .unwrap();
        assert_eq!(u.source(), TemplateSource::User);
        assert_eq!(
            u.render(&[ChatMessage::new("user", "Hi")], false).unwrap(),
            "<s>Hi"
        );
    }

    #[test]
    fn tool_support_is_detected_by_rendering() {
        let with = ChatTemplate::new(
            "{% for t in tools %}{{ t.function.name }}{% endfor %}{{ messages[0].content }}",
            TemplateSource::User,
            "",
            "",
        )
        .unwrap();
        assert!(with.renders_tools());
        let chatml = ChatTemplate::select(None, None, "llama", "", "").unwrap();
        assert!(!chatml.renders_tools());
        assert!(chatml.text().contains("<|im_start|>"));
    }

    #[test]
    fn strftime_now_is_registered() {
        let out = render("{{ strftime_now('%Y') }}", &[]).unwrap();
        assert!(out.len() == 4 && out.starts_with('2'), "{out}");
    }
}
