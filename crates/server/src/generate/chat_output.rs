//! A chat choice's text -> the message parts: reasoning (`--reasoning-parser`), then tool calls
//! (the request's tool format) out of what remains, incrementally for streams. Calls get their
//! `call_...` ids here, and come out as parts (start, arguments as generated, end) that every
//! API's stream formats the same way.

use pagoda_frontend::{ReasoningParser, ReasoningStream, ToolCallStream, ToolEvent};
use pagoda_protocol::ToolCall;

use crate::api::ids::random_id;
use crate::prepare::tools::ToolSetup;

/// What one piece of text turned into.
#[derive(Debug, Default)]
pub struct Split {
    pub content: String,
    pub reasoning: String,
    /// Complete calls, with their index among this choice's calls.
    pub calls: Vec<(u32, ToolCall)>,
    /// The same calls as they stream, in order: a call's parts may span several splits.
    pub parts: Vec<CallPart>,
}

impl Split {
    pub fn extend(&mut self, other: Split) {
        self.content.push_str(&other.content);
        self.reasoning.push_str(&other.reasoning);
        self.calls.extend(other.calls);
        self.parts.extend(other.parts);
    }
}

/// A piece of a tool call as a stream gives it out.
#[derive(Debug, Clone, PartialEq)]
pub enum CallPart {
    /// The `index`-th call begins: its id and name (arguments follow).
    Start {
        index: u32,
        id: String,
        name: String,
    },
    /// The next piece of its arguments; joined, the pieces are the call's `arguments`.
    Arguments { index: u32, text: String },
    /// It is complete.
    End { index: u32, call: ToolCall },
}

/// One choice's parsers.
#[derive(Debug)]
pub struct ChoiceOutput {
    reasoning: Option<ReasoningStream>,
    tools: Option<ToolCallStream>,
    num_calls: usize,
    /// The call being streamed: its index and id.
    open: Option<(usize, String)>,
    /// `single_call` and the first call ended: what follows is dropped.
    done: bool,
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
            open: None,
            done: false,
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
            if self.done {
                break;
            }
            match e {
                ToolEvent::Content(t) => split.content.push_str(&t),
                ToolEvent::CallStart { index, name } => {
                    let id = call_id();
                    self.num_calls = index + 1;
                    self.open = Some((index, id.clone()));
                    split.parts.push(CallPart::Start {
                        index: index as u32,
                        id,
                        name,
                    });
                }
                ToolEvent::Arguments { index, text } => split.parts.push(CallPart::Arguments {
                    index: index as u32,
                    text,
                }),
                ToolEvent::Call { index, call } => {
                    let index32 = index as u32;
                    let id = match self.open.take() {
                        Some((i, id)) if i == index => id,
                        _ => {
                            // A call that arrives whole: its start and arguments first.
                            let id = call_id();
                            split.parts.push(CallPart::Start {
                                index: index32,
                                id: id.clone(),
                                name: call.name.clone(),
                            });
                            split.parts.push(CallPart::Arguments {
                                index: index32,
                                text: call.arguments.clone(),
                            });
                            id
                        }
                    };
                    self.num_calls = index + 1;
                    let call = ToolCall {
                        id,
                        kind: "function".to_owned(),
                        function: pagoda_protocol::FunctionCall {
                            name: call.name,
                            arguments: call.arguments,
                        },
                    };
                    split.parts.push(CallPart::End {
                        index: index32,
                        call: call.clone(),
                    });
                    split.calls.push((index32, call));
                    self.done = self.single_call;
                }
            }
        }
        split
    }
}

/// A new call id, `call_...` as OpenAI writes them.
fn call_id() -> String {
    random_id("call").replacen("call-", "call_", 1)
}
