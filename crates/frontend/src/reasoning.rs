//! Reasoning content: models that think inside `<think>...</think>` before answering get that
//! part split off into `reasoning_content` (vLLM / DeepSeek's field), incrementally, holding
//! back text that may be the start of a marker.

use std::str::FromStr;

const OPEN: &str = "<think>";
const CLOSE: &str = "</think>";

/// `--reasoning-parser`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ReasoningParser {
    /// No splitting: everything is content.
    #[default]
    None,
    /// `<think>...</think>`.
    Think,
}

impl FromStr for ReasoningParser {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(Self::None),
            "think" | "deepseek_r1" | "qwen3" => Ok(Self::Think),
            other => Err(format!(
                "unknown reasoning parser {other:?} (expected think or none)"
            )),
        }
    }
}

/// A piece of output, split.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReasoningDelta {
    pub reasoning: String,
    pub content: String,
}

/// Splits one generation. The reasoning is the text between a leading `<think>` (or the start,
/// when the prompt already opened the block, as Qwen3-style templates do) and `</think>`.
#[derive(Debug)]
pub struct ReasoningStream {
    state: State,
    pending: String,
}

#[derive(Debug, PartialEq, Eq)]
enum State {
    /// Before the first non-whitespace text: may open with `<think>`.
    Start,
    Thinking,
    /// After `</think>`: leading newlines are layout.
    AfterThinking,
    Content,
}

impl ReasoningStream {
    /// `prompt_opened`: the prompt ends inside an open `<think>` block.
    pub fn new(prompt_opened: bool) -> Self {
        Self {
            state: if prompt_opened {
                State::Thinking
            } else {
                State::Start
            },
            pending: String::new(),
        }
    }

    /// Whether `prompt` (the rendered chat prompt) leaves a `<think>` block open.
    pub fn prompt_opens_thinking(prompt: &str) -> bool {
        match (prompt.rfind(OPEN), prompt.rfind(CLOSE)) {
            (Some(o), Some(c)) => o > c,
            (Some(_), None) => true,
            _ => false,
        }
    }

    pub fn push(&mut self, text: &str) -> ReasoningDelta {
        self.pending.push_str(text);
        let mut out = ReasoningDelta::default();
        loop {
            match self.state {
                State::Start => {
                    let t = self.pending.trim_start();
                    if t.is_empty() {
                        break;
                    }
                    if let Some(rest) = t.strip_prefix(OPEN) {
                        self.pending = rest.to_owned();
                        self.state = State::Thinking;
                    } else if OPEN.starts_with(t) {
                        break;
                    } else {
                        self.state = State::Content;
                    }
                }
                State::Thinking => {
                    if let Some(end) = self.pending.find(CLOSE) {
                        out.reasoning.push_str(&self.pending[..end]);
                        self.pending.drain(..end + CLOSE.len());
                        self.state = State::AfterThinking;
                    } else {
                        let keep = crate::tool_calls::partial_marker_len(&self.pending, CLOSE);
                        let n = self.pending.len() - keep;
                        out.reasoning.push_str(&self.pending[..n]);
                        self.pending.drain(..n);
                        break;
                    }
                }
                State::AfterThinking => {
                    let t = self.pending.trim_start_matches(['\n', '\r', ' ']);
                    if t.is_empty() {
                        self.pending.clear();
                        break;
                    }
                    self.pending = t.to_owned();
                    self.state = State::Content;
                }
                State::Content => {
                    out.content.push_str(&self.pending);
                    self.pending.clear();
                    break;
                }
            }
        }
        out
    }

    /// What was held back, at the end of the generation.
    pub fn finish(&mut self) -> ReasoningDelta {
        let rest = std::mem::take(&mut self.pending);
        match self.state {
            State::Thinking => ReasoningDelta {
                reasoning: rest,
                content: String::new(),
            },
            State::AfterThinking => ReasoningDelta::default(),
            State::Start | State::Content => ReasoningDelta {
                reasoning: String::new(),
                content: rest,
            },
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn run(text: &str, cuts: &[usize], opened: bool) -> (String, String) {
        let mut s = ReasoningStream::new(opened);
        let (mut r, mut c) = (String::new(), String::new());
        let mut last = 0;
        for &cut in cuts.iter().chain(std::iter::once(&text.len())) {
            let d = s.push(&text[last..cut]);
            r.push_str(&d.reasoning);
            c.push_str(&d.content);
            last = cut;
        }
        let d = s.finish();
        r.push_str(&d.reasoning);
        c.push_str(&d.content);
        (r, c)
    }

    #[test]
    fn splits_at_every_byte_boundary() {
        let cases = [
            (
                "<think>\nA < b, so </thin not yet.\n</think>\n\nThe answer is 4.",
                false,
            ),
            ("I reason é</think>Answer", true),
            ("No thinking here <think> at all", false),
            ("<thi", false),
        ];
        for (text, opened) in cases {
            let whole = run(text, &[], opened);
            for a in (0..=text.len()).filter(|&i| text.is_char_boundary(i)) {
                assert_eq!(run(text, &[a], opened), whole, "{text:?} split at {a}");
            }
            let all: Vec<usize> = (1..text.len())
                .filter(|&i| text.is_char_boundary(i))
                .collect();
            assert_eq!(run(text, &all, opened), whole);
        }
        assert_eq!(
            run(cases[0].0, &[], false),
            (
                "\nA < b, so </thin not yet.\n".into(),
                "The answer is 4.".into()
            )
        );
        assert_eq!(
            run(cases[1].0, &[], true),
            ("I reason é".into(), "Answer".into())
        );
        assert_eq!(
            run(cases[2].0, &[], false),
            (String::new(), cases[2].0.into())
        );
        assert_eq!(run("<thi", &[], false), (String::new(), "<thi".into()));
    }

    #[test]
    fn prompt_detection_and_names() {
        assert!(ReasoningStream::prompt_opens_thinking(
            "<|im_start|>assistant\n<think>\n"
        ));
        assert!(!ReasoningStream::prompt_opens_thinking(
            "<think>x</think>\n"
        ));
        assert_eq!("think".parse(), Ok(ReasoningParser::Think));
        assert!("r1x".parse::<ReasoningParser>().is_err());
    }
}
