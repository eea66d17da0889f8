//! A call's arguments streamed as the model writes them: the head of a call body,
//! `{"name": "<name>", "arguments": ` (or `"parameters"`), is recognised as soon as it is
//! complete, then the arguments object passes through with the whitespace outside its strings
//! dropped, so the pieces join to exactly the compact text the finished call reports.

/// What the start of a call body is.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Head {
    /// Too short to tell.
    NeedMore,
    /// Not `{"name": "...", "arguments": {` (another key order, arguments as a string, not
    /// JSON): the call is parsed whole when it closes.
    No,
    /// The head, ending right before the arguments object's `{`.
    Found { name: String, len: usize },
}

/// Why a scan stopped short.
enum Stop {
    More,
    No,
}

struct Cursor<'a> {
    s: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn ws(&mut self) {
        while self.s.get(self.at).is_some_and(u8::is_ascii_whitespace) {
            self.at += 1;
        }
    }

    fn byte(&mut self, b: u8) -> Result<(), Stop> {
        self.ws();
        match self.s.get(self.at) {
            None => Err(Stop::More),
            Some(&c) if c == b => {
                self.at += 1;
                Ok(())
            }
            Some(_) => Err(Stop::No),
        }
    }

    /// A JSON string, decoded.
    fn string(&mut self) -> Result<String, Stop> {
        self.ws();
        let start = self.at;
        self.byte(b'"')?;
        let mut escape = false;
        loop {
            let &c = self.s.get(self.at).ok_or(Stop::More)?;
            self.at += 1;
            match c {
                _ if escape => escape = false,
                b'\\' => escape = true,
                b'"' => break,
                _ => {}
            }
        }
        std::str::from_utf8(&self.s[start..self.at])
            .ok()
            .and_then(|q| serde_json::from_str(q).ok())
            .ok_or(Stop::No)
    }

    fn head(&mut self) -> Result<String, Stop> {
        self.byte(b'{')?;
        if self.string()? != "name" {
            return Err(Stop::No);
        }
        self.byte(b':')?;
        let name = self.string()?;
        self.byte(b',')?;
        let key = self.string()?;
        if key != "arguments" && key != "parameters" {
            return Err(Stop::No);
        }
        self.byte(b':')?;
        self.ws();
        // Only an object streams; a string of JSON is decoded whole at the end.
        match self.s.get(self.at) {
            None => Err(Stop::More),
            Some(b'{') => Ok(name),
            Some(_) => Err(Stop::No),
        }
    }
}

/// The head of `body`, the call text after `<tool_call>` so far.
pub(super) fn head(body: &str) -> Head {
    let mut c = Cursor {
        s: body.as_bytes(),
        at: 0,
    };
    match c.head() {
        Ok(name) => Head::Found { name, len: c.at },
        Err(Stop::More) => Head::NeedMore,
        Err(Stop::No) => Head::No,
    }
}

/// Passes a JSON value through with insignificant whitespace dropped and sees where it ends.
#[derive(Debug, Default)]
pub(super) struct Compactor {
    depth: u32,
    in_string: bool,
    escape: bool,
    done: bool,
}

impl Compactor {
    /// The compact text of as much of `text` as belongs to the value, and the bytes of `text`
    /// it took (all of them unless the value ended inside).
    pub(super) fn feed(&mut self, text: &str) -> (String, usize) {
        let mut out = String::with_capacity(text.len());
        for (i, ch) in text.char_indices() {
            if self.done {
                return (out, i);
            }
            if self.in_string {
                out.push(ch);
                match ch {
                    _ if self.escape => self.escape = false,
                    '\\' => self.escape = true,
                    '"' => self.in_string = false,
                    _ => {}
                }
                continue;
            }
            match ch {
                c if c.is_ascii_whitespace() => continue,
                '"' => self.in_string = true,
                '{' | '[' => self.depth += 1,
                '}' | ']' => {
                    self.depth = self.depth.saturating_sub(1);
                    self.done = self.depth == 0;
                }
                _ => {}
            }
            out.push(ch);
        }
        (out, text.len())
    }

    /// Whether the value is complete.
    pub(super) fn done(&self) -> bool {
        self.done
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_head_is_found_only_when_complete() {
        let body = "\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}";
        let at = body.find("{\"city").unwrap();
        // Found once the arguments' `{` is seen (a string would not stream).
        for n in 0..=at {
            assert_eq!(head(&body[..n]), Head::NeedMore, "{:?}", &body[..n]);
        }
        for n in at + 1..=body.len() {
            assert_eq!(
                head(&body[..n]),
                Head::Found {
                    name: "get_weather".into(),
                    len: at
                }
            );
        }
        assert_eq!(head("{\"arguments\": {}"), Head::No);
        assert_eq!(head("{\"name\": \"f\", \"arguments\": \"{}\"}"), Head::No);
        assert_eq!(head("not json"), Head::No);
        let escaped = "{\"name\":\"a\\\"b\",\"parameters\":{";
        assert_eq!(
            head(escaped),
            Head::Found {
                name: "a\"b".into(),
                len: escaped.len() - 1
            }
        );
    }

    #[test]
    fn the_compactor_keeps_strings_and_stops_at_the_end() {
        let mut c = Compactor::default();
        let text = "{ \"q\": \"a  b\\\" }\",\n \"n\": [1, {\"x\": 2}] }}\n</tool_call>";
        let mut out = String::new();
        let mut taken = 0;
        for piece in text.as_bytes().chunks(3) {
            let piece = std::str::from_utf8(piece).unwrap();
            let (o, n) = c.feed(piece);
            out.push_str(&o);
            taken += n;
            if c.done() {
                break;
            }
        }
        assert_eq!(out, r#"{"q":"a  b\" }","n":[1,{"x":2}]}"#);
        assert_eq!(&text[taken..], "}\n</tool_call>");
    }
}
