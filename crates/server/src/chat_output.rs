//! A chat choice's text -> the message parts: reasoning (`--reasoning-parser`), then tool calls
//! (the request's tool format) out of what remains, incrementally for streams. Calls get their
//! `call_...` ids here.

use pagoda_frontend::{ReasoningParser, ReasoningStream, ToolCallStream, ToolEvent};
use pagoda_protocol::ToolCall;

use crate::routes::random_id;
use crate::tools::ToolSetup;

/// What one piece of text turned into.
#[derive(Debug, Default)]
pub struct Split {
    pub content: String,
    pub reasoning: String,
    /// Complete calls, with their index among this choice's calls.
    pub calls: Vec<(u32, ToolCall)>,
}

impl Split {
    fn extend(&mut self, other: Split) {
        self.content.push_str(&other.content);
        self.reasoning.push_str(&other.reasoning);
        self.calls.extend(other.calls);
    }
}

/// One choice's parsers.
#[derive(Debug)]
pub struct ChoiceOutput {
    reasoning: Option<ReasoningStream>,
    tools: Option<ToolCallStream>,
    num_calls: usize,
    /// `parallel_tool_calls: false`: the reply ends at its first call; later calls and text
    /// are dropped.
    single_call: bool,
}

impl ChoiceOutput {
    /// `prompt_text`: the rendered prompt (a template may open the `<think>` block itself).
    pub fn new(reasoning: ReasoningParser, tools: Option<&ToolSetup>, prompt_text: &str) -> Self {
        Self {
            reasoning: (reasoning == ReasoningParser::Think)
                .then(|| ReasoningStream::new(ReasoningStream::prompt_opens_thinking(prompt_text))),
            tools: tools.map(ToolSetup::call_stream),
            num_calls: 0,
            single_call: false,
        }
    }

    /// At most one call per reply (`parallel_tool_calls: false`).
    pub fn single_call(mut self, single: bool) -> Self {
        self.single_call = single;
        self
    }

    pub fn push(&mut self, text: &str) -> Split {
        let (reasoning, content) = match &mut self.reasoning {
            Some(r) => {
                let d = r.push(text);
                (d.reasoning, d.content)
            }
            None => (String::new(), text.to_owned()),
        };
        let mut split = self.content(&content);
        split.reasoning = reasoning;
        split
    }

    /// Flushes what the parsers held back.
    pub fn finish(&mut self) -> Split {
        let mut split = match &mut self.reasoning {
            Some(r) => {
                let d = r.finish();
                let mut s = self.content(&d.content);
                s.reasoning = d.reasoning;
                s
            }
            None => Split::default(),
        };
        if let Some(t) = &mut self.tools {
            let events = t.finish();
            split.extend(self.events(events));
        }
        split
    }

    /// Tool calls found so far.
    pub fn num_calls(&self) -> usize {
        self.num_calls
    }

    fn content(&mut self, text: &str) -> Split {
        match &mut self.tools {
            Some(t) => {
                let events = t.push(text);
                self.events(events)
            }
            None => Split {
                content: text.to_owned(),
                ..Default::default()
            },
        }
    }

    fn events(&mut self, events: Vec<ToolEvent>) -> Split {
        let mut split = Split::default();
        for e in events {
            if self.single_call && self.num_calls > 0 {
                break;
            }
            match e {
                ToolEvent::Content(t) => split.content.push_str(&t),
                ToolEvent::Call { index, call } => {
                    self.num_calls = index + 1;
                    split.calls.push((
                        index as u32,
                        ToolCall {
                            id: random_id("call").replacen("call-", "call_", 1),
                            kind: "function".to_owned(),
                            function: pagoda_protocol::FunctionCall {
                                name: call.name,
                                arguments: call.arguments,
                            },
                        },
                    ));
                }
            }
        }
        split
    }
}
