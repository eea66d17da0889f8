//! Hermes-style calls: `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`, any number
//! of them, with optional text around (the syntax of Qwen 2.5's template). Whitespace next to a
//! call is layout, not content. A call whose body opens `{"name": ..., "arguments": {` streams:
//! its name as soon as the head is complete, then its arguments piece by piece.

use super::call_head::{Compactor, Head, head};
use super::{ParsedToolCall, Piece, call_from_json, partial_marker_len};

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";

#[derive(Debug, Default)]
pub(super) struct HermesParser {
    /// Text not yet given out: in content mode, a possible partial `<tool_call>` and trailing
    /// whitespace; in a call, the call body so far.
    pending: String,
    in_call: bool,
    /// The open call's streaming state, once its head is known.
    streaming: Option<Streaming>,
    /// The open call's head is not the streamable one: it is parsed whole at its close.
    whole: bool,
    seen_call: bool,
    /// Right after a call: leading whitespace is layout.
    after_call: bool,
}

/// A call being streamed: its name, the arguments given out so far (compact), and where the
/// arguments object stands.
#[derive(Debug)]
struct Streaming {
    name: String,
    arguments: String,
    compactor: Compactor,
}

impl HermesParser {
    pub(super) fn push(&mut self, text: &str) -> Vec<Piece> {
        self.pending.push_str(text);
        let mut out = Vec::new();
        loop {
            if self.in_call {
                let end = self.pending.find(CLOSE);
                if !self.whole {
                    self.stream_body(end, &mut out);
                }
                let Some(end) = self.pending.find(CLOSE) else {
                    break;
                };
                let body: String = self.pending[..end].to_owned();
                self.pending.drain(..end + CLOSE.len());
                self.in_call = false;
                self.whole = false;
                self.after_call = true;
                out.push(match self.streaming.take() {
                    Some(s) => s.end(),
                    None => body_to_piece(&body, true),
                });
            } else if let Some(start) = self.pending.find(OPEN) {
                let before = self.pending[..start].to_owned();
                self.pending.drain(..start + OPEN.len());
                let before = if self.after_call {
                    before.trim()
                } else {
                    before.trim_end()
                };
                if !before.is_empty() {
                    out.push(Piece::Content(before.to_owned()));
                }
                self.in_call = true;
                self.seen_call = true;
            } else {
                // Hold back a possible partial marker and trailing whitespace (which is layout
                // if a call follows); after a call, leading whitespace is layout too.
                let keep_marker = partial_marker_len(&self.pending, OPEN);
                let head = &self.pending[..self.pending.len() - keep_marker];
                let keep = self.pending.len() - head.trim_end().len();
                let mut emit: String = self.pending[..self.pending.len() - keep].to_owned();
                if self.after_call {
                    let trimmed = emit.trim_start();
                    if trimmed.len() != emit.len() {
                        // Leading layout after a call: drop it from the buffer too.
                        let cut = emit.len() - trimmed.len();
                        emit = trimmed.to_owned();
                        self.pending.drain(..cut);
                    }
                }
                if !emit.is_empty() {
                    self.after_call = false;
                    self.pending.drain(..emit.len());
                    out.push(Piece::Content(emit));
                }
                break;
            }
        }
        out
    }

    /// Gives out what the open call's body (up to the closing tag at `end`, or all but a
    /// possible partial one) adds: the head once complete, then arguments.
    fn stream_body(&mut self, end: Option<usize>, out: &mut Vec<Piece>) {
        let avail = end.unwrap_or(self.pending.len() - partial_marker_len(&self.pending, CLOSE));
        if self.streaming.is_none() {
            match head(&self.pending[..avail]) {
                Head::NeedMore => return,
                Head::No => {
                    self.whole = true;
                    return;
                }
                Head::Found { name, len } => {
                    out.push(Piece::Start(name.clone()));
                    self.pending.drain(..len);
                    self.streaming = Some(Streaming {
                        name,
                        arguments: String::new(),
                        compactor: Compactor::default(),
                    });
                }
            }
        }
        let Some(s) = &mut self.streaming else {
            return;
        };
        let avail = avail.min(self.pending.len());
        if s.compactor.done() || avail == 0 {
            return;
        }
        let (piece, taken) = s.compactor.feed(&self.pending[..avail]);
        self.pending.drain(..taken);
        if !piece.is_empty() {
            s.arguments.push_str(&piece);
            out.push(Piece::Arguments(piece));
        }
    }

    pub(super) fn finish(&mut self) -> Vec<Piece> {
        let rest = std::mem::take(&mut self.pending);
        if self.in_call {
            // No closing tag (the model stopped right after the JSON, or was cut off).
            self.in_call = false;
            self.whole = false;
            if let Some(s) = self.streaming.take() {
                return vec![s.end()];
            }
            return vec![body_to_piece(&rest, false)];
        }
        let text = if self.after_call {
            rest.trim()
        } else if self.seen_call {
            rest.trim_end()
        } else {
            rest.as_str()
        };
        vec![Piece::Content(text.to_owned())]
    }
}

impl Streaming {
    /// The finished call: its arguments exactly as streamed (`{}` if none were written).
    fn end(self) -> Piece {
        let arguments = if self.arguments.is_empty() {
            "{}".to_owned()
        } else {
            self.arguments
        };
        Piece::End(ParsedToolCall {
            name: self.name,
            arguments,
        })
    }
}

/// A call body as a call, or (when it is not a call's JSON) back to the text it came from.
fn body_to_piece(body: &str, closed: bool) -> Piece {
    match serde_json::from_str::<serde_json::Value>(body.trim())
        .ok()
        .as_ref()
        .and_then(call_from_json)
    {
        Some(call) => Piece::Call(call),
        None => Piece::Content(format!("{OPEN}{body}{}", if closed { CLOSE } else { "" })),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::{ParsedToolCall, ToolCallFormat, ToolCallStream, ToolEvent};

    /// Content and calls of `text` pushed in pieces cut at `cuts`.
    fn run(text: &str, cuts: &[usize]) -> (String, Vec<ParsedToolCall>) {
        let mut s = ToolCallStream::new(ToolCallFormat::Hermes);
        let mut events = Vec::new();
        let mut last = 0;
        for &c in cuts.iter().chain(std::iter::once(&text.len())) {
            events.extend(s.push(&text[last..c]));
            last = c;
        }
        events.extend(s.finish());
        let mut content = String::new();
        let mut calls = Vec::new();
        // A started call: its name and the arguments streamed so far.
        let mut open: Option<(String, String)> = None;
        for e in events {
            match e {
                ToolEvent::Content(t) => content.push_str(&t),
                ToolEvent::CallStart { index, name } => {
                    assert_eq!(index, calls.len());
                    assert!(open.is_none(), "a call starts inside another");
                    open = Some((name, String::new()));
                }
                ToolEvent::Arguments { index, text } => {
                    assert_eq!(index, calls.len());
                    open.as_mut()
                        .expect("arguments outside a call")
                        .1
                        .push_str(&text);
                }
                ToolEvent::Call { index, call } => {
                    assert_eq!(index, calls.len());
                    if let Some((name, args)) = open.take() {
                        assert_eq!(name, call.name);
                        let args = if args.is_empty() {
                            "{}".to_owned()
                        } else {
                            args
                        };
                        assert_eq!(
                            args, call.arguments,
                            "the streamed pieces are the arguments"
                        );
                    }
                    calls.push(call)
                }
            }
        }
        assert!(open.is_none(), "a started call never ended");
        (content, calls)
    }

    #[test]
    fn every_split_point_gives_the_same_result() {
        let text = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Zürich\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>";
        let whole = run(text, &[]);
        // No markup in content, whatever the split (checked through the equality below).
        assert_eq!(whole.0, "Let me check.");
        assert_eq!(
            whole.1,
            vec![
                ParsedToolCall {
                    name: "get_weather".into(),
                    arguments: r#"{"city":"Zürich"}"#.into()
                },
                ParsedToolCall {
                    name: "now".into(),
                    arguments: "{}".into()
                }
            ]
        );
        for a in 0..=text.len() {
            if !text.is_char_boundary(a) {
                continue;
            }
            assert_eq!(run(text, &[a]), whole, "split at {a}");
            for b in (a..=text.len()).step_by(7) {
                if text.is_char_boundary(b) {
                    assert_eq!(run(text, &[a, b]), whole, "split at {a}, {b}");
                }
            }
        }
        let bytes: Vec<usize> = (1..text.len())
            .filter(|&i| text.is_char_boundary(i))
            .collect();
        assert_eq!(run(text, &bytes), whole, "one character at a time");
    }

    #[test]
    fn plain_text_passes_through_and_bad_json_stays_content() {
        assert_eq!(run("a < b and <tool", &[3, 12]).0, "a < b and <tool");
        let (content, calls) = run("<tool_call>not json</tool_call>", &[5]);
        assert_eq!(content, "<tool_call>not json</tool_call>");
        assert!(calls.is_empty());
    }

    #[test]
    fn arguments_stream_before_the_call_closes() {
        let mut s = ToolCallStream::new(ToolCallFormat::Hermes);
        let mut events = s.push("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"ci");
        events.extend(s.push("ty\": \"Par"));
        assert_eq!(
            events,
            vec![
                ToolEvent::CallStart {
                    index: 0,
                    name: "get_weather".into()
                },
                ToolEvent::Arguments {
                    index: 0,
                    text: "{\"ci".into()
                },
                ToolEvent::Arguments {
                    index: 0,
                    text: "ty\":\"Par".into()
                },
            ]
        );
        let rest = s.push("is\"}}\n</tool_call>");
        assert_eq!(
            rest.last(),
            Some(&ToolEvent::Call {
                index: 0,
                call: ParsedToolCall {
                    name: "get_weather".into(),
                    arguments: r#"{"city":"Paris"}"#.into()
                }
            })
        );
        // Arguments written as a string of JSON are not streamed: the call comes whole.
        let (_, calls) = run(
            "<tool_call>{\"name\": \"f\", \"arguments\": \"{}\"}</tool_call>",
            &[30],
        );
        assert_eq!(calls[0].arguments, "{}");
    }

    #[test]
    fn unclosed_call_at_the_end_still_parses() {
        let (content, calls) = run(
            "<tool_call>\n{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": 1}\"}",
            &[20],
        );
        assert_eq!(content, "");
        assert_eq!(calls[0].arguments, r#"{"x":1}"#);
    }
}
