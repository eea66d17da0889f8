//! Calls written without the template's markup: under `tool_choice: "auto"` small models often
//! answer with a bare `{"name": ..., "arguments": {...}}` (or a list of them, or either in a
//! ``` fence) instead of `<tool_call>` tags. A reply that is exactly such a call of a declared
//! tool, with arguments that fit its schema, is taken as a call; anything else stays content.
//! A reply that opens like a call is held back until it is clear which it is.

use serde_json::Value;

use super::schema_check::{conforms, fully_checked};
use super::{ParsedToolCall, call_from_json};

/// The tools a request declared: name and parameter schema.
#[derive(Clone, Debug, Default)]
pub struct DeclaredTools(Vec<(String, Value)>);

impl DeclaredTools {
    /// From OpenAI `tools` entries (`{"type": "function", "function": {"name", "parameters"}}`).
    pub fn from_openai(tools: &[Value]) -> Self {
        Self(
            tools
                .iter()
                .filter_map(|t| {
                    let f = t.get("function").unwrap_or(t);
                    let name = f.get("name")?.as_str()?.to_owned();
                    let schema = f.get("parameters").cloned().unwrap_or(Value::Bool(true));
                    Some((name, schema))
                })
                .collect(),
        )
    }

    /// Only the tools whose schemas [`conforms`] checks in full: a bare call of a strict tool
    /// is taken only when its arguments are known to satisfy the schema, as the grammar would
    /// have made them.
    pub fn fully_checked(self) -> Self {
        Self(
            self.0
                .into_iter()
                .filter(|(_, s)| fully_checked(s))
                .collect(),
        )
    }

    fn schema(&self, name: &str) -> Option<&Value> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, s)| s)
    }
}

/// The calls `text` is exactly, if it is one call object or a list of them (bare or fenced),
/// each naming a declared tool with arguments that fit its schema.
pub fn exact_calls(text: &str, tools: &DeclaredTools) -> Option<Vec<ParsedToolCall>> {
    let v: Value = serde_json::from_str(unfence(text)?).ok()?;
    let objects = match v {
        Value::Array(list) if !list.is_empty() => list,
        v @ Value::Object(_) => vec![v],
        _ => return None,
    };
    objects
        .iter()
        .map(|o| {
            let call = call_from_json(o)?;
            let schema = tools.schema(&call.name)?;
            let args: Value = serde_json::from_str(&call.arguments).ok()?;
            conforms(&args, schema).then_some(call)
        })
        .collect()
}

/// The text inside a complete ``` fence (an optional language tag after the opener), or the
/// trimmed text when there is no fence; `None` for a fence not closed yet.
fn unfence(text: &str) -> Option<&str> {
    let t = text.trim();
    let Some(rest) = t.strip_prefix("```") else {
        return Some(t);
    };
    let body = rest.trim_start_matches(|c: char| c.is_ascii_alphanumeric());
    let inner = body.strip_suffix("```")?;
    Some(inner.trim())
}

/// Whether `buf` (the reply so far) may still turn out to be a bare or fenced call.
fn may_be_call(buf: &str) -> bool {
    let t = buf.trim_start();
    let body = match t.strip_prefix("```") {
        Some(rest) => {
            let lang_end = rest
                .find(|c: char| !c.is_ascii_alphanumeric())
                .unwrap_or(rest.len());
            if lang_end == rest.len() {
                return true; // still in the language tag
            }
            rest[lang_end..].trim_start()
        }
        None if "```".starts_with(t) => return true,
        None => t,
    };
    if let Some(inner) = unfence(t)
        && serde_json::from_str::<Value>(inner).is_ok()
    {
        // Complete JSON: a call only if it parses as one (decided at the end).
        return true;
    }
    let body = body.strip_prefix('[').map_or(body, str::trim_start);
    let Some(obj) = body.strip_prefix('{') else {
        return body.is_empty();
    };
    let obj = obj.trim_start();
    let Some(key) = obj.strip_prefix('"') else {
        return obj.is_empty();
    };
    const KEYS: [&str; 3] = ["name", "arguments", "parameters"];
    match key.find('"') {
        Some(end) => KEYS.contains(&&key[..end]),
        None => KEYS.iter().any(|k| k.starts_with(key)),
    }
}

/// Holds back a reply that opens like a call.
#[derive(Debug)]
pub(super) enum Gate {
    /// Only whitespace so far.
    Undecided(String),
    /// Could be a call: nothing is given out until it is clear.
    Holding(String),
    /// Not a bare call: text passes through.
    Open,
}

impl Gate {
    pub(super) fn new() -> Self {
        Self::Undecided(String::new())
    }

    /// The text to pass on now (empty while holding).
    pub(super) fn push(&mut self, text: &str) -> String {
        match self {
            Self::Open => text.to_owned(),
            Self::Undecided(buf) | Self::Holding(buf) => {
                buf.push_str(text);
                let t = buf.trim_start();
                if t.is_empty() {
                    return String::new();
                }
                let starts_like_call = t.starts_with(['{', '[', '`']);
                if starts_like_call && may_be_call(buf) {
                    let held = std::mem::take(buf);
                    *self = Self::Holding(held);
                    String::new()
                } else {
                    let out = std::mem::take(buf);
                    *self = Self::Open;
                    out
                }
            }
        }
    }

    /// At the end: the calls the held reply is, or the text to pass on.
    pub(super) fn finish(&mut self, tools: &DeclaredTools) -> Result<Vec<ParsedToolCall>, String> {
        match std::mem::replace(self, Self::Open) {
            Self::Holding(buf) => exact_calls(&buf, tools).ok_or(buf),
            Self::Undecided(buf) => Err(buf),
            Self::Open => Err(String::new()),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tools() -> DeclaredTools {
        DeclaredTools::from_openai(&[json!({"type": "function", "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                           "required": ["city"]}}})])
    }

    #[test]
    fn bare_fenced_and_listed_calls_are_recognised() {
        let t = tools();
        let want = vec![ParsedToolCall {
            name: "get_weather".into(),
            arguments: r#"{"city":"Paris"}"#.into(),
        }];
        for text in [
            r#"{"name": "get_weather", "arguments": {"city": "Paris"}}"#,
            "  ```json\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n```\n",
            r#"[{"name": "get_weather", "arguments": {"city": "Paris"}}]"#,
            r#"{"arguments": {"city": "Paris"}, "name": "get_weather"}"#,
        ] {
            assert_eq!(exact_calls(text, &t), Some(want.clone()), "{text}");
        }
        for text in [
            r#"{"name": "other", "arguments": {"city": "Paris"}}"#,
            r#"{"name": "get_weather", "arguments": {"town": "Paris"}}"#,
            r#"{"name": "get_weather", "arguments": {"city": "Paris"}} and more"#,
            r#"{"city": "Paris"}"#,
            "Paris",
        ] {
            assert_eq!(exact_calls(text, &t), None, "{text}");
        }
    }

    #[test]
    fn the_gate_holds_only_what_may_be_a_call() {
        let t = tools();
        let mut g = Gate::new();
        assert_eq!(g.push("  "), "");
        assert_eq!(g.push("{\"na"), "");
        assert_eq!(
            g.push("me\": \"get_weather\", \"arguments\": {\"city\": \"P\"}}"),
            ""
        );
        assert_eq!(g.finish(&t).unwrap()[0].name, "get_weather");

        let mut g = Gate::new();
        assert_eq!(
            g.push("{\"answer\": 4"),
            "{\"answer\": 4",
            "a JSON answer is released"
        );
        assert_eq!(g.push("2}"), "2}");

        let mut g = Gate::new();
        assert_eq!(g.push("``"), "");
        assert_eq!(g.push("`python\nprint"), "```python\nprint");

        let mut g = Gate::new();
        assert_eq!(g.push("Sure, "), "Sure, ");
        assert_eq!(g.finish(&t), Err(String::new()));
    }
}
