//! The Messages API's writer: a generation's text, split into text and tool calls by the chat
//! path's `ChoiceOutput`, becomes content blocks; streamed as Anthropic's events
//! (`message_start`, `content_block_*`, `message_delta` with the stop reason and usage,
//! `message_stop`), or gathered into one `message`.

use pagoda_protocol::anthropic::{
    AnthropicUsage, BlockDelta, ContentBlock, MessageDelta, MessagesResponse, StreamEvent,
};
use pagoda_protocol::{FinishReason, StopReason, Usage, sse};
use serde_json::Value;

use crate::api::ids::random_id;
use crate::error::ApiError;
use crate::error::shape::ErrorShape;
use crate::generate::chat_output::{CallPart, ChoiceOutput, Split};
use crate::generate::generation::ChoiceUpdate;
use crate::generate::stream::ChoiceFormatter;
use crate::state::AppState;

pub struct Formatter {
    id: String,
    model: String,
    prompt_tokens: u32,
    output: ChoiceOutput,
    /// The reply's blocks so far (text grows in place while its block is open).
    blocks: Vec<ContentBlock>,
    /// The index of the text block a stream is writing to.
    open_text: Option<u32>,
    /// The index of the `tool_use` block whose input is streaming.
    open_tool: Option<u32>,
    stop_reason: Option<String>,
    stop_sequence: Option<String>,
}

impl Formatter {
    pub fn new(
        state: &AppState,
        model: &str,
        prompt_tokens: usize,
        tools: Option<&crate::prepare::tools::ToolSetup>,
        parallel_tool_calls: bool,
        prompt_text: &str,
    ) -> Self {
        Self {
            id: random_id("msg").replacen("msg-", "msg_", 1),
            model: model.to_owned(),
            prompt_tokens: prompt_tokens as u32,
            output: ChoiceOutput::new(state.config().reasoning_parser, tools, prompt_text)
                .single_call(!parallel_tool_calls),
            blocks: Vec::new(),
            open_text: None,
            open_tool: None,
            stop_reason: None,
            stop_sequence: None,
        }
    }

    /// The update's text and calls (parsers flushed at the end), and its stop reason.
    fn split(&mut self, u: &ChoiceUpdate) -> Split {
        let mut split = self.output.push(&u.text);
        if let Some(f) = &u.finish {
            let tail = self.output.finish();
            split.extend(tail);
            let (reason, sequence) = match (f.reason, &f.stop_reason) {
                _ if self.output.num_calls() > 0 && f.reason != FinishReason::Length => {
                    ("tool_use", None)
                }
                (FinishReason::Length, _) => ("max_tokens", None),
                (_, Some(StopReason::Text(s))) => ("stop_sequence", Some(s.clone())),
                _ => ("end_turn", None),
            };
            self.stop_reason = Some(reason.to_owned());
            self.stop_sequence = sequence;
        }
        // Reasoning has no block of its own here: a `<think>` model's reasoning is text.
        split
            .content
            .insert_str(0, &std::mem::take(&mut split.reasoning));
        split
    }

    fn message(&self, content: Vec<ContentBlock>, usage: AnthropicUsage) -> MessagesResponse {
        MessagesResponse {
            id: self.id.clone(),
            kind: "message".to_owned(),
            role: "assistant".to_owned(),
            content,
            model: self.model.clone(),
            stop_reason: self.stop_reason.clone(),
            stop_sequence: self.stop_sequence.clone(),
            usage,
        }
    }

    /// Appends `text` to the open text block, opening one first if needed; the events that says.
    fn add_text(&mut self, text: &str, out: &mut Vec<StreamEvent>) {
        if text.is_empty() {
            return;
        }
        let index = match self.open_text {
            Some(i) => i,
            None => {
                let i = self.blocks.len() as u32;
                self.blocks.push(ContentBlock::Text {
                    text: String::new(),
                });
                out.push(StreamEvent::ContentBlockStart {
                    index: i,
                    content_block: ContentBlock::Text {
                        text: String::new(),
                    },
                });
                self.open_text = Some(i);
                i
            }
        };
        if let Some(ContentBlock::Text { text: t }) = self.blocks.get_mut(index as usize) {
            t.push_str(text);
        }
        out.push(StreamEvent::ContentBlockDelta {
            index,
            delta: BlockDelta::TextDelta {
                text: text.to_owned(),
            },
        });
    }

    fn close_text(&mut self, out: &mut Vec<StreamEvent>) {
        if let Some(index) = self.open_text.take() {
            out.push(StreamEvent::ContentBlockStop { index });
        }
    }

    /// A `tool_use` block's events: started with the call, its input as `input_json_delta`
    /// pieces as they are generated, stopped when the call ends.
    fn call_part(&mut self, part: CallPart, out: &mut Vec<StreamEvent>) {
        match part {
            CallPart::Start { id, name, .. } => {
                self.close_text(out);
                let index = self.blocks.len() as u32;
                let block = ContentBlock::ToolUse {
                    id: id.replacen("call_", "toolu_", 1),
                    name,
                    input: Value::Object(Default::default()),
                };
                out.push(StreamEvent::ContentBlockStart {
                    index,
                    content_block: block.clone(),
                });
                self.blocks.push(block);
                self.open_tool = Some(index);
            }
            CallPart::Arguments { text, .. } => {
                if let Some(index) = self.open_tool {
                    out.push(StreamEvent::ContentBlockDelta {
                        index,
                        delta: BlockDelta::InputJsonDelta { partial_json: text },
                    });
                }
            }
            CallPart::End { call, .. } => {
                let Some(index) = self.open_tool.take() else {
                    return;
                };
                if let Some(ContentBlock::ToolUse { input, .. }) =
                    self.blocks.get_mut(index as usize)
                {
                    *input = serde_json::from_str(&call.function.arguments)
                        .unwrap_or_else(|_| Value::Object(Default::default()));
                }
                out.push(StreamEvent::ContentBlockStop { index });
            }
        }
    }

    /// An update's events; the blocks grow as they go out, so a whole answer is the same.
    fn update(&mut self, u: &ChoiceUpdate) -> Vec<StreamEvent> {
        let split = self.split(u);
        let mut out = Vec::new();
        self.add_text(&split.content, &mut out);
        for part in split.parts {
            self.call_part(part, &mut out);
        }
        if u.finish.is_some() {
            self.close_text(&mut out);
        }
        out
    }
}

fn anthropic_usage(u: &Usage) -> AnthropicUsage {
    let cached = u.prompt_tokens_details.map_or(0, |d| d.cached_tokens);
    AnthropicUsage {
        input_tokens: u.prompt_tokens - cached.min(u.prompt_tokens),
        output_tokens: u.completion_tokens,
        cache_read_input_tokens: cached,
        cache_creation_input_tokens: 0,
    }
}

fn event(e: &StreamEvent) -> String {
    sse::encode_event(e.name(), e).unwrap_or_else(|err| {
        ErrorShape::Anthropic.stream_event(&ApiError::internal(err.to_string()))
    })
}

impl ChoiceFormatter for Formatter {
    type Response = MessagesResponse;

    fn opening(&mut self, _num_choices: usize) -> String {
        let usage = AnthropicUsage {
            input_tokens: self.prompt_tokens,
            ..Default::default()
        };
        event(&StreamEvent::MessageStart {
            message: self.message(Vec::new(), usage),
        })
    }

    fn events(&mut self, u: ChoiceUpdate) -> String {
        self.update(&u).iter().map(event).collect()
    }

    fn closing(&mut self, usage: Usage, _include_usage: bool) -> String {
        let mut out = event(&StreamEvent::MessageDelta {
            delta: MessageDelta {
                stop_reason: self.stop_reason.clone(),
                stop_sequence: self.stop_sequence.clone(),
            },
            usage: anthropic_usage(&usage),
        });
        out.push_str(&event(&StreamEvent::MessageStop));
        out
    }

    fn error_event(&self, e: &ApiError) -> String {
        ErrorShape::Anthropic.stream_event(e)
    }

    fn absorb(&mut self, u: ChoiceUpdate) {
        self.update(&u);
    }

    fn response(mut self, usage: Usage) -> MessagesResponse {
        let blocks = std::mem::take(&mut self.blocks);
        self.message(blocks, anthropic_usage(&usage))
    }
}
