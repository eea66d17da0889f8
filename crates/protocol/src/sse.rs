//! Server-sent events: framing for the server (`data: {json}\n\n`, `data: [DONE]\n\n`) and an
//! incremental parser for clients that accepts byte chunks split anywhere.
//!
//! The parser follows the WHATWG "event stream interpretation" rules: lines end in `\n`, `\r\n`
//! or `\r`; a line starting with `:` is a comment; `field: value` drops one space after the
//! colon; several `data` lines join with `\n`; a blank line dispatches the event.

use serde::Serialize;

use crate::error::ErrorResponse;

/// The data of the end-of-stream sentinel OpenAI sends after the last chunk.
pub const DONE_DATA: &str = "[DONE]";

/// The complete end-of-stream event.
pub const DONE_EVENT: &str = "data: [DONE]\n\n";

/// Frame a JSON value as one `data:` event. Compact JSON never contains a raw newline, so one
/// `data` line suffices.
pub fn encode_data<T: Serialize>(value: &T) -> Result<String, serde_json::Error> {
    let json = serde_json::to_string(value)?;
    Ok(format!("data: {json}\n\n"))
}

/// Frame an error that happens after the SSE headers were sent: a plain `data:` event carrying
/// the OpenAI error body, which is what vLLM sends and what the `openai` client raises on.
pub fn encode_error(error: &ErrorResponse) -> String {
    // Serializing a struct of strings cannot fail; fall back to a fixed body just in case.
    encode_data(error).unwrap_or_else(|_| {
        "data: {\"error\":{\"message\":\"internal error\",\"type\":\"server_error\",\"param\":null,\"code\":null}}\n\n".to_owned()
    })
}

/// Frame an event with an explicit `event:` name. Each line of `data` becomes its own `data:`
/// line so the receiver rebuilds it exactly.
pub fn encode_named(event: &str, data: &str) -> String {
    let mut out = format!("event: {event}\n");
    for line in data.split('\n') {
        out.push_str("data: ");
        out.push_str(line);
        out.push('\n');
    }
    out.push('\n');
    out
}

/// Frame a JSON value as one event named `event` (Anthropic's and the Responses API's streams
/// name every event).
pub fn encode_event<T: Serialize>(event: &str, value: &T) -> Result<String, serde_json::Error> {
    let json = serde_json::to_string(value)?;
    Ok(format!("event: {event}\ndata: {json}\n\n"))
}

/// One dispatched event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field; `None` means the default type `message`.
    pub event: Option<String>,
    /// The `data:` lines joined with `\n`.
    pub data: String,
    /// The last `id:` field seen, if any.
    pub id: Option<String>,
}

impl SseEvent {
    /// Is this the OpenAI `[DONE]` sentinel?
    pub fn is_done(&self) -> bool {
        self.data == DONE_DATA
    }

    /// Is this an error event, either `event: error` or a `data: {"error": ...}` body?
    pub fn is_error(&self) -> bool {
        self.event.as_deref() == Some("error") || self.data.trim_start().starts_with("{\"error\"")
    }
}

/// Incremental SSE parser: [`feed`](SseParser::feed) it byte chunks, take complete events.
#[derive(Debug, Default)]
pub struct SseParser {
    /// Bytes of the line being read (decoded only when complete, so split UTF-8 is fine).
    line: Vec<u8>,
    /// The previous chunk ended in `\r`; a leading `\n` in the next one belongs to it.
    after_cr: bool,
    /// Whether the first line has been seen (a leading BOM is dropped).
    started: bool,
    /// `data` of the event being built, each line followed by `\n`.
    data: String,
    /// `event` of the event being built.
    event: Option<String>,
    /// Last event id (persists across events, per the spec).
    last_id: Option<String>,
    /// Any field line seen since the last dispatch.
    has_fields: bool,
}

impl SseParser {
    /// A parser at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Consume a chunk and return the events it completes, in order.
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        let mut events = Vec::new();
        for &b in chunk {
            if self.after_cr {
                self.after_cr = false;
                if b == b'\n' {
                    continue;
                }
            }
            match b {
                b'\n' => self.end_line(&mut events),
                b'\r' => {
                    self.after_cr = true;
                    self.end_line(&mut events);
                }
                _ => self.line.push(b),
            }
        }
        events
    }

    /// End of stream: return the event still being built, if it has data. The spec discards
    /// it, but servers that omit the final blank line are common enough to be lenient.
    pub fn finish(&mut self) -> Option<SseEvent> {
        if !self.line.is_empty() {
            let mut events = Vec::new();
            self.end_line(&mut events);
            debug_assert!(events.is_empty());
        }
        self.dispatch()
    }

    fn end_line(&mut self, events: &mut Vec<SseEvent>) {
        let bytes = std::mem::take(&mut self.line);
        let mut line = String::from_utf8_lossy(&bytes).into_owned();
        if !self.started {
            self.started = true;
            if let Some(rest) = line.strip_prefix('\u{feff}') {
                line = rest.to_owned();
            }
        }
        if line.is_empty() {
            if let Some(event) = self.dispatch() {
                events.push(event);
            }
            return;
        }
        if line.starts_with(':') {
            return; // comment (keep-alive)
        }
        let (field, value) = match line.find(':') {
            Some(i) => {
                let value = &line[i + 1..];
                (&line[..i], value.strip_prefix(' ').unwrap_or(value))
            }
            None => (line.as_str(), ""),
        };
        match field {
            "data" => {
                self.data.push_str(value);
                self.data.push('\n');
                self.has_fields = true;
            }
            "event" => {
                self.event = Some(value.to_owned());
                self.has_fields = true;
            }
            // An id containing NUL is ignored (WHATWG).
            "id" if !value.contains('\0') => self.last_id = Some(value.to_owned()),
            _ => {} // `retry` and unknown fields do not matter to OpenAI clients
        }
    }

    fn dispatch(&mut self) -> Option<SseEvent> {
        let event = self.event.take();
        let had_fields = std::mem::take(&mut self.has_fields);
        if self.data.is_empty() {
            // The spec drops events without data; an `event: error` with no data still matters.
            return (had_fields && event.as_deref() == Some("error")).then(|| SseEvent {
                event,
                data: String::new(),
                id: self.last_id.clone(),
            });
        }
        let mut data = std::mem::take(&mut self.data);
        data.pop(); // the trailing '\n' of the last data line
        Some(SseEvent {
            event,
            data,
            id: self.last_id.clone(),
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const STREAM: &str = ": keep-alive\r\n\
        data: {\"a\":1}\r\n\r\n\
        data: line one\n\
        data: line two\n\n\
        event: error\n\
        data: {\"error\":{\"message\":\"boom\"}}\n\n\
        id: 7\r\
        data:no-space\r\r\
        data: caf\u{e9} \u{1F916}\n\n\
        data: [DONE]\n\n";

    fn expected() -> Vec<SseEvent> {
        vec![
            SseEvent {
                event: None,
                data: "{\"a\":1}".into(),
                id: None,
            },
            SseEvent {
                event: None,
                data: "line one\nline two".into(),
                id: None,
            },
            SseEvent {
                event: Some("error".into()),
                data: "{\"error\":{\"message\":\"boom\"}}".into(),
                id: None,
            },
            SseEvent {
                event: None,
                data: "no-space".into(),
                id: Some("7".into()),
            },
            SseEvent {
                event: None,
                data: "caf\u{e9} \u{1F916}".into(),
                id: Some("7".into()),
            },
            SseEvent {
                event: None,
                data: "[DONE]".into(),
                id: Some("7".into()),
            },
        ]
    }

    #[test]
    fn whole_stream_parses() {
        let mut p = SseParser::new();
        let events = p.feed(STREAM.as_bytes());
        assert_eq!(events, expected());
        assert!(events[2].is_error());
        assert!(events[5].is_done());
        assert_eq!(p.finish(), None);
    }

    #[test]
    fn every_split_point_gives_the_same_events() {
        let bytes = STREAM.as_bytes();
        for cut in 0..=bytes.len() {
            let mut p = SseParser::new();
            let mut events = p.feed(&bytes[..cut]);
            events.extend(p.feed(&bytes[cut..]));
            assert_eq!(events, expected(), "split at byte {cut}");
        }
    }

    #[test]
    fn byte_by_byte_gives_the_same_events() {
        let mut p = SseParser::new();
        let events: Vec<_> = STREAM
            .as_bytes()
            .iter()
            .flat_map(|b| p.feed(&[*b]))
            .collect();
        assert_eq!(events, expected());
    }

    #[test]
    fn encoded_events_parse_back() {
        let value = serde_json::json!({"text": "a\nb", "n": 3});
        let mut wire = encode_data(&value).unwrap();
        wire.push_str(&encode_named("error", "x\ny"));
        wire.push_str(&encode_error(&ErrorResponse::server_error("engine died")));
        wire.push_str(DONE_EVENT);
        let events = SseParser::new().feed(wire.as_bytes());
        assert_eq!(events.len(), 4);
        let back: serde_json::Value = serde_json::from_str(&events[0].data).unwrap();
        assert_eq!(back, value);
        assert_eq!(events[1].event.as_deref(), Some("error"));
        assert_eq!(events[1].data, "x\ny");
        assert!(events[2].is_error());
        let err: ErrorResponse = serde_json::from_str(&events[2].data).unwrap();
        assert_eq!(err.error.message, "engine died");
        assert!(events[3].is_done());
    }

    #[test]
    fn finish_returns_an_unterminated_event() {
        let mut p = SseParser::new();
        assert!(p.feed(b"data: tail").is_empty());
        assert_eq!(p.finish().map(|e| e.data), Some("tail".to_owned()));
    }

    #[test]
    fn bom_and_empty_data_events() {
        let mut p = SseParser::new();
        let events = p.feed("\u{feff}data: x\n\nevent: ping\n\n:c\n\n".as_bytes());
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].data, "x");
    }
}
