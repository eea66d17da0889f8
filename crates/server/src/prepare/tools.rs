//! `tools` and `tool_choice` of a chat request: validated into a `ToolSetup` that says how the
//! tools reach the prompt (the template's `tools` variable, or the generic system-prompt
//! section when the template ignores them), which grammar constrains the reply (`required`,
//! a named function, and the generic format's `auto`), and which parser reads the output.

use pagoda_frontend::chat_prompt::TemplateTools;
use pagoda_frontend::tool_calls::{
    DeclaredTools, generic_history, generic_system_prompt, tool_call_grammar,
};
use pagoda_frontend::{ToolCallFormat, ToolCallStream};
use pagoda_structured::Constraint;
use serde_json::{Map, Value, json};

use crate::prepare::field_policy::Ignored;
use crate::prepare::validation_error::ValidationError;
use crate::state::Loaded;

/// `tool_choice`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolChoice {
    None,
    Auto,
    Required,
    /// The index in `tools` of the one function to call.
    Named(usize),
}

/// The validated tools of a request.
#[derive(Clone, Debug)]
pub struct ToolSetup {
    pub format: ToolCallFormat,
    pub tools: Vec<Value>,
    pub choice: ToolChoice,
    /// The template ignores `tools`: use the generic system-prompt section instead.
    pub inject: bool,
    /// A tool has `strict: true`: calls are constrained to the tools' schemas under `auto`
    /// too (OpenAI's and Anthropic's strict tools), not only when a call is required.
    pub strict: bool,
}

/// `None` when the request has no tools (or `tool_choice: "none"` with none given).
pub fn parse(
    loaded: &Loaded,
    tools: Option<&Value>,
    tool_choice: Option<&Value>,
    ignored: &mut Ignored,
) -> Result<Option<ToolSetup>, ValidationError> {
    let tools = match tools {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(list)) => list.clone(),
        Some(_) => return Err(ValidationError::rule("tools", "`tools` must be a list")),
    };
    for (i, t) in tools.iter().enumerate() {
        check_tool(i, t, ignored)?;
    }
    let name_of = |t: &Value| t["function"]["name"].as_str().map(str::to_owned);
    let choice = match tool_choice {
        None | Some(Value::Null) => {
            if tools.is_empty() {
                ToolChoice::None
            } else {
                ToolChoice::Auto
            }
        }
        Some(Value::String(s)) => match s.as_str() {
            "none" => ToolChoice::None,
            "auto" => ToolChoice::Auto,
            "required" => ToolChoice::Required,
            other => {
                return Err(ValidationError::rule(
                    "tool_choice",
                    format!(
                        "`tool_choice` must be \"none\", \"auto\", \"required\" or {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}, got {other:?}"
                    ),
                ));
            }
        },
        Some(v @ Value::Object(_)) => {
            let name = v
                .get("function")
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .filter(|_| v.get("type").and_then(Value::as_str) == Some("function"))
                .ok_or_else(|| {
                    ValidationError::rule(
                        "tool_choice",
                        "a named `tool_choice` is {\"type\": \"function\", \"function\": {\"name\": ...}}",
                    )
                })?;
            let i = tools
                .iter()
                .position(|t| name_of(t).as_deref() == Some(name))
                .ok_or_else(|| {
                    ValidationError::rule(
                        "tool_choice",
                        format!(
                            "`tool_choice` names the function {name:?}, which is not in `tools`"
                        ),
                    )
                })?;
            ToolChoice::Named(i)
        }
        Some(_) => {
            return Err(ValidationError::rule(
                "tool_choice",
                "`tool_choice` must be a string or an object",
            ));
        }
    };
    if choice != ToolChoice::None && tools.is_empty() {
        return Err(ValidationError::rule(
            "tool_choice",
            "`tool_choice` other than \"none\" needs `tools`",
        ));
    }
    if choice == ToolChoice::None {
        return Ok(None);
    }
    let format = loaded.tool_format.ok_or_else(|| {
        ValidationError::unsupported(
            "tools",
            "tool calling is turned off (--tool-call-parser none)",
        )
    })?;
    let strict = tools.iter().any(|t| t["function"]["strict"] == json!(true));
    Ok(Some(ToolSetup {
        format,
        tools,
        choice,
        inject: !loaded.template.renders_tools() || format == ToolCallFormat::Generic,
        strict,
    }))
}

/// `{"type": "function", "function": {"name", "description"?, "parameters"?, "strict"?}}`.
/// Other keys are ignored and noted.
fn check_tool(i: usize, t: &Value, ignored: &mut Ignored) -> Result<(), ValidationError> {
    let field = format!("tools[{i}]");
    let bad = |what: &str| ValidationError::rule(&field, format!("`{field}` {what}"));
    let obj = t.as_object().ok_or_else(|| bad("must be an object"))?;
    if obj.get("type").and_then(Value::as_str) != Some("function") {
        return Err(bad("must have `type: \"function\"`"));
    }
    let f = obj
        .get("function")
        .and_then(Value::as_object)
        .ok_or_else(|| bad("needs a `function` object"))?;
    ignored.content_keys(obj, &field, &["type", "function"]);
    let known = &["name", "description", "parameters", "strict"];
    ignored.content_keys(f, &format!("{field}.function"), known);
    let name = f
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("needs `function.name`"))?;
    // OpenAI's rule for function names.
    if name.is_empty()
        || name.len() > 64
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        return Err(bad(&format!(
            "has the function name {name:?}; names are 1-64 characters of a-z, A-Z, 0-9, _ and -"
        )));
    }
    if f.get("parameters").is_some_and(|p| !p.is_object()) {
        return Err(bad("`function.parameters` must be a JSON schema object"));
    }
    if f.get("strict")
        .is_some_and(|s| !s.is_boolean() && !s.is_null())
    {
        return Err(bad("`function.strict` must be a boolean"));
    }
    Ok(())
}

impl ToolSetup {
    /// The parser of a reply: the format's markup; under `auto` in a native format, also a
    /// reply that is exactly a bare or fenced call of a declared tool.
    pub fn call_stream(&self) -> ToolCallStream {
        let stream = ToolCallStream::new(self.format);
        if self.choice != ToolChoice::Auto || self.format == ToolCallFormat::Generic {
            return stream;
        }
        let declared = DeclaredTools::from_openai(&self.tools);
        // Under a strict tool's grammar, text outside the call tags is free: small models write
        // untagged calls there (openai-agents' and pydantic-ai's runs did). Such a call counts
        // only when its tool's schema is one whose every keyword is checked, so the arguments
        // are known to satisfy it as the grammar would have made them.
        let declared = if self.strict {
            declared.fully_checked()
        } else {
            declared
        };
        stream.with_bare_calls(declared)
    }

    /// Whether the request named the one function to call (OpenAI then reports
    /// `finish_reason: "stop"`, not `"tool_calls"`).
    pub fn is_named(&self) -> bool {
        matches!(self.choice, ToolChoice::Named(_))
    }

    /// The grammar the reply must follow: a call for `required` / named; for the generic
    /// format under `auto`, a call or a `{"response": ...}` (llama.cpp constrains its generic
    /// format the same way); for the native format under `auto`, nothing, unless a tool is
    /// strict: then text without the call tag, or calls whose arguments follow their schemas.
    pub fn constraint(&self) -> Result<Option<Constraint>, ValidationError> {
        let (tools, allow_text): (Vec<&Value>, bool) = match self.choice {
            ToolChoice::None => return Ok(None),
            ToolChoice::Auto if self.format == ToolCallFormat::Generic || self.strict => {
                (self.tools.iter().collect(), true)
            }
            ToolChoice::Auto => return Ok(None),
            ToolChoice::Required => (self.tools.iter().collect(), false),
            ToolChoice::Named(i) => (self.tools.get(i).into_iter().collect(), false),
        };
        tool_call_grammar(self.format, &tools, allow_text)
            .map(|g| Some(Constraint::Grammar(g)))
            .map_err(|e| ValidationError::rule("tools", e.to_string()))
    }
}

impl TemplateTools for ToolSetup {
    /// The tools for the template's `tools` variable (`None` when they are injected instead).
    fn template_tools(&self) -> Option<Value> {
        (!self.inject).then(|| Value::Array(self.tools.clone()))
    }

    /// The messages as the template should see them: in the generic format, history in its
    /// JSON reply form and the tool section appended to (or forming) the system message.
    fn adapt_messages(&self, messages: Vec<Value>) -> Vec<Value> {
        if !self.inject {
            return messages;
        }
        let mut list = generic_history(&messages);
        let section = generic_system_prompt(&self.tools);
        match list.first_mut() {
            Some(Value::Object(first)) if first.get("role") == Some(&json!("system")) => {
                let text = first.get("content").and_then(Value::as_str).unwrap_or("");
                let merged = if text.is_empty() {
                    section
                } else {
                    format!("{text}\n\n{section}")
                };
                first.insert("content".into(), json!(merged));
            }
            _ => {
                let mut sys = Map::new();
                sys.insert("role".into(), json!("system"));
                sys.insert("content".into(), json!(section));
                list.insert(0, Value::Object(sys));
            }
        }
        list
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strict_setup(parameters: Value) -> ToolSetup {
        ToolSetup {
            format: ToolCallFormat::Hermes,
            tools: vec![
                json!({"type": "function", "function": {"name": "get_weather",
                "strict": true, "parameters": parameters}}),
            ],
            choice: ToolChoice::Auto,
            inject: false,
            strict: true,
        }
    }

    fn calls_in(setup: &ToolSetup, reply: &str) -> usize {
        let mut stream = setup.call_stream();
        stream.push(reply);
        stream.finish();
        stream.num_calls()
    }

    #[test]
    fn an_untagged_call_of_a_strict_tool_counts_when_its_schema_is_checked_in_full() {
        let reply = r#"{"name": "get_weather", "arguments": {"city": "Paris"}}"#;
        let checked = json!({"type": "object", "properties": {"city": {"type": "string"}},
            "required": ["city"], "additionalProperties": false});
        assert_eq!(calls_in(&strict_setup(checked.clone()), reply), 1);
        // Arguments outside the schema stay text.
        let wrong = r#"{"name": "get_weather", "arguments": {"town": "Paris"}}"#;
        assert_eq!(calls_in(&strict_setup(checked), wrong), 0);
        // A keyword the check cannot judge (`pattern`): the call is not known to fit.
        let unchecked = json!({"type": "object",
            "properties": {"city": {"type": "string", "pattern": "^[A-Z]"}}});
        assert_eq!(calls_in(&strict_setup(unchecked), reply), 0);
    }
}
