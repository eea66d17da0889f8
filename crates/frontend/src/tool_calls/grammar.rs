//! Lark grammars (llguidance syntax) that admit only well-formed calls in a model's tool syntax:
//! used for `tool_choice` required or named, where the reply must be a call, and for the generic
//! format under `auto`, where it must be a call or a `{"response": ...}`. Arguments are embedded
//! JSON schemas (`%json {...}`) with fixed separators (NOTES.md gotcha 3: flexible whitespace
//! lets sampling run away on spaces).

use serde_json::{Value, json};

use super::ToolCallFormat;

/// Why a tool list cannot become a grammar.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ToolGrammarError {
    #[error("no tools to call")]
    NoTools,
    #[error("tool #{0} has no `function.name` string")]
    MissingName(usize),
}

/// The grammar for one reply of `format` that is a call of one of `tools` (OpenAI `tools`
/// entries, `{"type": "function", "function": {"name", "parameters"}}`); with `allow_text` a
/// reply without a call is admitted too: `{"response": "..."}` in the generic format, and in
/// the Hermes format any text without the `<tool_call>` tag, or one or more calls (strict tools
/// under `auto`: whatever the model writes as a call follows the schema).
pub fn tool_call_grammar(
    format: ToolCallFormat,
    tools: &[&Value],
    allow_text: bool,
) -> Result<String, ToolGrammarError> {
    if tools.is_empty() {
        return Err(ToolGrammarError::NoTools);
    }
    let mut rules = String::new();
    let mut alternatives = Vec::new();
    for (i, tool) in tools.iter().enumerate() {
        let f = tool.get("function").unwrap_or(tool);
        let name = f
            .get("name")
            .and_then(Value::as_str)
            .ok_or(ToolGrammarError::MissingName(i))?;
        let mut schema = f
            .get("parameters")
            .cloned()
            .unwrap_or_else(|| json!({"type": "object", "properties": {}}));
        if let Value::Object(obj) = &mut schema {
            obj.insert(
                "x-guidance".into(),
                json!({"whitespace_flexible": false, "item_separator": ", ", "key_separator": ": "}),
            );
        }
        let head = format!("{{\"name\": {}, \"arguments\": ", json!(name));
        let (open, close) = match format {
            ToolCallFormat::Hermes => (format!("<tool_call>\n{head}"), "}\n</tool_call>"),
            ToolCallFormat::Generic => (format!("{{\"tool_call\": {head}"), "}}"),
        };
        rules.push_str(&format!(
            "call_{i}: {} args_{i} {}\nargs_{i}: %json {schema}\n",
            lark_string(&open),
            lark_string(close)
        ));
        alternatives.push(format!("call_{i}"));
    }
    let calls = alternatives.join(" | ");
    match (allow_text, format) {
        (false, _) => Ok(format!("start: {calls}\n{rules}")),
        (true, ToolCallFormat::Generic) => {
            rules.push_str(&format!(
                "response: {} response_text {}\nresponse_text: %json {}\n",
                lark_string("{\"response\": "),
                lark_string("}"),
                json!({"type": "string"})
            ));
            Ok(format!("start: {calls} | response\n{rules}"))
        }
        // Calls one per line, as the Qwen 2.5 template writes several; text is a lexeme that
        // cannot contain the opening tag (llguidance's `&` and `~` on lexemes).
        (true, ToolCallFormat::Hermes) => Ok(format!(
            "start: TEXT | calls\ncalls: call (\"\\n\" call)*\ncall: {calls}\n\
             TEXT: /(.|\\n)*/ & ~/(.|\\n)*<tool_call>(.|\\n)*/\n{rules}"
        )),
    }
}

/// A Lark string literal: JSON string escaping, which llguidance's lexer reads.
fn lark_string(s: &str) -> String {
    Value::String(s.to_owned()).to_string()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn hermes_grammar_embeds_the_schema() {
        let t = json!({"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}});
        let g = tool_call_grammar(ToolCallFormat::Hermes, &[&t], false).unwrap();
        assert!(g.starts_with("start: call_0\n"), "{g}");
        assert!(g.contains(r#"call_0: "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": " args_0 "}\n</tool_call>""#), "{g}");
        assert!(g.contains(r#"args_0: %json {"type":"object","properties":{"city":{"type":"string"}},"x-guidance""#), "{g}");
        assert_eq!(
            tool_call_grammar(ToolCallFormat::Hermes, &[], false),
            Err(ToolGrammarError::NoTools)
        );
        let g = tool_call_grammar(ToolCallFormat::Generic, &[&t, &t], true).unwrap();
        assert!(g.starts_with("start: call_0 | call_1 | response\n"), "{g}");
        let g = tool_call_grammar(ToolCallFormat::Hermes, &[&t, &t], true).unwrap();
        assert!(
            g.starts_with(
                "start: TEXT | calls\ncalls: call (\"\\n\" call)*\ncall: call_0 | call_1\n"
            ),
            "{g}"
        );
    }
}
