//! Tool calling on the text side: which syntax a model writes its calls in (chosen from the chat
//! template, or by `--tool-call-parser`), incremental parsers that split generated text into
//! content and complete calls, the generic prompt format for templates that ignore `tools`, and
//! the Lark grammars that force a valid call for `tool_choice` required / named, and the
//! recognition of calls written without markup (`bare.rs`) for `tool_choice: "auto"`. Tagged
//! calls stream (name, then arguments as generated); other calls come whole when complete.

mod bare;
mod call_head;
mod generic;
mod grammar;
mod hermes;
mod schema_check;

use std::fmt;
use std::str::FromStr;

pub use bare::{DeclaredTools, exact_calls};
pub use generic::{GENERIC_SYSTEM_HEADER, generic_history, generic_system_prompt};
pub use grammar::{ToolGrammarError, tool_call_grammar};

/// A call the model made, arguments as compact JSON text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedToolCall {
    pub name: String,
    /// The arguments object serialized as JSON (`"{}"` when the model gave none).
    pub arguments: String,
}

/// What a piece of generated text turned out to be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolEvent {
    /// Text outside any call, for `content`.
    Content(String),
    /// The `index`-th call of this generation has begun: its name is known, its arguments
    /// follow as [`ToolEvent::Arguments`] pieces.
    CallStart { index: usize, name: String },
    /// The next piece of a started call's arguments (compact JSON text).
    Arguments { index: usize, text: String },
    /// A complete call (the `index`-th of this generation). For a started call its arguments
    /// are exactly the pieces given out, joined; otherwise the call arrives whole here.
    Call { index: usize, call: ParsedToolCall },
}

/// The syntax a model writes tool calls in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolCallFormat {
    /// `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` (Hermes, Qwen 2.5).
    Hermes,
    /// The whole reply is `{"tool_call": {"name", "arguments"}}`, `{"tool_calls": [...]}` or
    /// `{"response": "..."}` (llama.cpp's generic handler), for templates without tool support;
    /// the tools reach the model through [`generic_system_prompt`].
    Generic,
}

impl ToolCallFormat {
    /// The parser a template calls for: Hermes when it mentions `<tool_call>`, else generic.
    pub fn detect(template_text: &str) -> Self {
        if template_text.contains("<tool_call>") {
            Self::Hermes
        } else {
            Self::Generic
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Hermes => "hermes",
            Self::Generic => "generic",
        }
    }
}

impl fmt::Display for ToolCallFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `--tool-call-parser`: a format, `none` (tool calls are refused), or `auto` (from the template).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ToolParserChoice {
    #[default]
    Auto,
    None,
    Format(ToolCallFormat),
}

impl FromStr for ToolParserChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Self::Auto),
            "none" => Ok(Self::None),
            "hermes" => Ok(Self::Format(ToolCallFormat::Hermes)),
            "generic" => Ok(Self::Format(ToolCallFormat::Generic)),
            other => Err(format!(
                "unknown tool-call parser {other:?} (expected auto, hermes, generic or none)"
            )),
        }
    }
}

/// Splits a generation's text, pushed piece by piece, into content and tool calls. Text that
/// might still turn into call markup is held back, so no markup leaks into content.
#[derive(Debug)]
pub struct ToolCallStream {
    inner: Inner,
    calls: usize,
    /// With declared tools: a reply that is exactly a bare or fenced call is a call too.
    bare: Option<(bare::Gate, DeclaredTools)>,
}

#[derive(Debug)]
enum Inner {
    Hermes(hermes::HermesParser),
    Generic(generic::GenericParser),
}

impl ToolCallStream {
    pub fn new(format: ToolCallFormat) -> Self {
        let inner = match format {
            ToolCallFormat::Hermes => Inner::Hermes(hermes::HermesParser::default()),
            ToolCallFormat::Generic => Inner::Generic(generic::GenericParser::default()),
        };
        Self {
            inner,
            calls: 0,
            bare: None,
        }
    }

    /// Also takes a reply that is exactly a call of one of `tools` written without the
    /// format's markup (bare JSON, a list, or either in a ``` fence) as a call.
    pub fn with_bare_calls(mut self, tools: DeclaredTools) -> Self {
        self.bare = Some((bare::Gate::new(), tools));
        self
    }

    /// Events for `text`, the next piece of the generation.
    pub fn push(&mut self, text: &str) -> Vec<ToolEvent> {
        let passed;
        let text = match &mut self.bare {
            Some((gate, _)) => {
                passed = gate.push(text);
                passed.as_str()
            }
            None => text,
        };
        if text.is_empty() {
            return Vec::new();
        }
        let raw = self.inner_push(text);
        self.number(raw)
    }

    /// Events for whatever was held back, at the end of the generation.
    pub fn finish(&mut self) -> Vec<ToolEvent> {
        let mut raw = Vec::new();
        if let Some((gate, tools)) = &mut self.bare {
            match gate.finish(tools) {
                Ok(calls) => raw.extend(calls.into_iter().map(Piece::Call)),
                Err(text) if !text.is_empty() => raw = self.inner_push(&text),
                Err(_) => {}
            }
        }
        raw.extend(match &mut self.inner {
            Inner::Hermes(p) => p.finish(),
            Inner::Generic(p) => p.finish(),
        });
        self.number(raw)
    }

    fn inner_push(&mut self, text: &str) -> Vec<Piece> {
        match &mut self.inner {
            Inner::Hermes(p) => p.push(text),
            Inner::Generic(p) => p.push(text),
        }
    }

    /// Calls found so far.
    pub fn num_calls(&self) -> usize {
        self.calls
    }

    fn number(&mut self, raw: Vec<Piece>) -> Vec<ToolEvent> {
        let mut out: Vec<ToolEvent> = Vec::with_capacity(raw.len());
        for p in raw {
            match p {
                Piece::Content(t) if t.is_empty() => {}
                Piece::Content(t) => match out.last_mut() {
                    Some(ToolEvent::Content(prev)) => prev.push_str(&t),
                    _ => out.push(ToolEvent::Content(t)),
                },
                Piece::Start(name) => out.push(ToolEvent::CallStart {
                    index: self.calls,
                    name,
                }),
                Piece::Arguments(text) => out.push(ToolEvent::Arguments {
                    index: self.calls,
                    text,
                }),
                Piece::Call(call) | Piece::End(call) => {
                    out.push(ToolEvent::Call {
                        index: self.calls,
                        call,
                    });
                    self.calls += 1;
                }
            }
        }
        out
    }
}

/// A parser's output before calls are numbered.
#[derive(Debug)]
enum Piece {
    Content(String),
    /// A whole call.
    Call(ParsedToolCall),
    /// A streamed call: its name, its arguments' pieces, its end.
    Start(String),
    Arguments(String),
    End(ParsedToolCall),
}

/// Reads `{"name": ..., "arguments": {...}}` (also `parameters`, or arguments as a JSON string),
/// the object shape both formats use for one call.
fn call_from_json(v: &serde_json::Value) -> Option<ParsedToolCall> {
    let obj = v.as_object()?;
    let name = obj.get("name")?.as_str()?.to_owned();
    let args = obj.get("arguments").or_else(|| obj.get("parameters"));
    let arguments = match args {
        None | Some(serde_json::Value::Null) => "{}".to_owned(),
        Some(serde_json::Value::String(s)) => match serde_json::from_str::<serde_json::Value>(s) {
            Ok(v) => v.to_string(),
            Err(_) => return None,
        },
        Some(v) => v.to_string(),
    };
    Some(ParsedToolCall { name, arguments })
}

/// How many bytes at the end of `text` could be the start of `marker` (held back until the next
/// piece shows whether the marker follows).
pub(crate) fn partial_marker_len(text: &str, marker: &str) -> usize {
    let max = marker.len().saturating_sub(1).min(text.len());
    (1..=max)
        .rev()
        .find(|&n| {
            text.is_char_boundary(text.len() - n) && marker.starts_with(&text[text.len() - n..])
        })
        .unwrap_or(0)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn partial_marker() {
        assert_eq!(partial_marker_len("abc<tool", "<tool_call>"), 5);
        assert_eq!(partial_marker_len("abc<", "<tool_call>"), 1);
        assert_eq!(partial_marker_len("abc", "<tool_call>"), 0);
        assert_eq!(partial_marker_len("é", "<x>"), 0);
    }

    #[test]
    fn parser_choice_parses() {
        assert_eq!(
            "hermes".parse(),
            Ok(ToolParserChoice::Format(ToolCallFormat::Hermes))
        );
        assert_eq!("none".parse(), Ok(ToolParserChoice::None));
        assert!("xml".parse::<ToolParserChoice>().is_err());
        assert_eq!(
            ToolCallFormat::detect("..<tool_call>.."),
            ToolCallFormat::Hermes
        );
        assert_eq!(ToolCallFormat::detect("{{ m }}"), ToolCallFormat::Generic);
    }
}
