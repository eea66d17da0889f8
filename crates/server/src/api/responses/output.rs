//! The Responses API's writer: a generation's text, split by the chat path's `ChoiceOutput`,
//! becomes output items (a message, function calls); streamed as typed events with sequence
//! numbers (`response.created` ... `response.completed`), or gathered into one `response`.
//! A finished response is kept in the store when the request asked for it.

use pagoda_protocol::responses::{
    EventKind, InputTokensDetails, OutputContent, OutputItem, OutputTokensDetails, Response,
    ResponseEvent, ResponseUsage,
};
use pagoda_protocol::{ChatMessage, FinishReason, FunctionCall, Role, ToolCall, Usage, sse};
use serde_json::json;

use crate::api::ids::random_id;
use crate::api::responses::store::Stored;
use crate::error::ApiError;
use crate::generate::chat_output::{CallPart, ChoiceOutput};
use crate::generate::generation::ChoiceUpdate;
use crate::generate::stream::ChoiceFormatter;
use crate::state::AppState;

pub struct Formatter {
    state: AppState,
    /// The response as it is built: the request's echo, then output and usage.
    response: Response,
    output: ChoiceOutput,
    /// The output index of the message a stream is writing to.
    open_message: Option<usize>,
    /// The output index of the function call whose arguments are streaming.
    open_call: Option<usize>,
    sequence: u64,
    /// The conversation before this response, stored with it when `store`.
    conversation: Vec<ChatMessage>,
}

impl Formatter {
    /// `response`: the request's echo (status `in_progress`, no output); `conversation`: the
    /// messages that led to it, without the instructions.
    pub fn new(
        state: &AppState,
        mut response: Response,
        output: ChoiceOutput,
        conversation: Vec<ChatMessage>,
    ) -> Self {
        response.id = random_id("resp").replacen("resp-", "resp_", 1);
        response.created_at = crate::api::ids::now_secs();
        Self {
            state: state.clone(),
            response,
            output,
            open_message: None,
            open_call: None,
            sequence: 0,
            conversation,
        }
    }

    fn event(&mut self, kind: EventKind) -> String {
        let e = ResponseEvent {
            sequence_number: self.sequence,
            kind,
        };
        self.sequence += 1;
        sse::encode_event(e.kind.name(), &e)
            .unwrap_or_else(|err| self.error_event(&ApiError::internal(err.to_string())))
    }

    fn item_id(&self, index: usize) -> String {
        match &self.response.output[index] {
            OutputItem::Message { id, .. } | OutputItem::FunctionCall { id, .. } => id.clone(),
        }
    }

    fn add_text(&mut self, text: &str, out: &mut Vec<EventKind>) {
        if text.is_empty() {
            return;
        }
        let index = match self.open_message {
            Some(i) => i,
            None => {
                let i = self.response.output.len();
                let item = OutputItem::Message {
                    id: random_id("msg").replacen("msg-", "msg_", 1),
                    status: "in_progress".into(),
                    role: "assistant".into(),
                    content: Vec::new(),
                };
                out.push(EventKind::OutputItemAdded {
                    output_index: i as u32,
                    item: item.clone(),
                });
                self.response.output.push(item);
                out.push(EventKind::ContentPartAdded {
                    item_id: self.item_id(i),
                    output_index: i as u32,
                    content_index: 0,
                    part: text_part(""),
                });
                if let OutputItem::Message { content, .. } = &mut self.response.output[i] {
                    content.push(text_part(""));
                }
                self.open_message = Some(i);
                i
            }
        };
        if let OutputItem::Message { content, .. } = &mut self.response.output[index]
            && let Some(OutputContent::OutputText { text: t, .. }) = content.first_mut()
        {
            t.push_str(text);
        }
        out.push(EventKind::OutputTextDelta {
            item_id: self.item_id(index),
            output_index: index as u32,
            content_index: 0,
            delta: text.to_owned(),
            logprobs: Vec::new(),
        });
    }

    fn close_message(&mut self, out: &mut Vec<EventKind>) {
        let Some(index) = self.open_message.take() else {
            return;
        };
        let item_id = self.item_id(index);
        let OutputItem::Message {
            status, content, ..
        } = &mut self.response.output[index]
        else {
            return;
        };
        *status = "completed".into();
        let part = content.first().cloned().unwrap_or_else(|| text_part(""));
        let OutputContent::OutputText { text, .. } = &part;
        out.push(EventKind::OutputTextDone {
            item_id: item_id.clone(),
            output_index: index as u32,
            content_index: 0,
            text: text.clone(),
            logprobs: Vec::new(),
        });
        out.push(EventKind::ContentPartDone {
            item_id,
            output_index: index as u32,
            content_index: 0,
            part,
        });
        out.push(EventKind::OutputItemDone {
            output_index: index as u32,
            item: self.response.output[index].clone(),
        });
    }

    /// A function-call item's events: added when the call starts, its arguments as they are
    /// generated, done when it ends.
    fn call_part(&mut self, part: CallPart, out: &mut Vec<EventKind>) {
        match part {
            CallPart::Start { id, name, .. } => {
                self.close_message(out);
                let index = self.response.output.len();
                let item = OutputItem::FunctionCall {
                    id: id.replacen("call_", "fc_", 1),
                    call_id: id,
                    name,
                    arguments: String::new(),
                    status: "in_progress".to_owned(),
                };
                out.push(EventKind::OutputItemAdded {
                    output_index: index as u32,
                    item: item.clone(),
                });
                self.response.output.push(item);
                self.open_call = Some(index);
            }
            CallPart::Arguments { text, .. } => {
                let Some(index) = self.open_call else { return };
                if let OutputItem::FunctionCall { arguments, .. } = &mut self.response.output[index]
                {
                    arguments.push_str(&text);
                }
                out.push(EventKind::FunctionCallArgumentsDelta {
                    item_id: self.item_id(index),
                    output_index: index as u32,
                    delta: text,
                });
            }
            CallPart::End { call, .. } => {
                let Some(index) = self.open_call.take() else {
                    return;
                };
                let item = OutputItem::FunctionCall {
                    id: self.item_id(index),
                    call_id: call.id,
                    name: call.function.name.clone(),
                    arguments: call.function.arguments.clone(),
                    status: "completed".to_owned(),
                };
                out.push(EventKind::FunctionCallArgumentsDone {
                    item_id: self.item_id(index),
                    output_index: index as u32,
                    name: call.function.name,
                    arguments: call.function.arguments,
                });
                out.push(EventKind::OutputItemDone {
                    output_index: index as u32,
                    item: item.clone(),
                });
                self.response.output[index] = item;
            }
        }
    }

    /// An update's events; the response grows as they go out, so a whole answer is the same.
    fn update(&mut self, u: &ChoiceUpdate) -> Vec<EventKind> {
        let mut split = self.output.push(&u.text);
        if let Some(f) = &u.finish {
            let tail = self.output.finish();
            split.extend(tail);
            if f.reason == FinishReason::Length {
                self.response.status = "incomplete".into();
                self.response.incomplete_details = Some(json!({"reason": "max_output_tokens"}));
            } else {
                self.response.status = "completed".into();
            }
        }
        let mut out = Vec::new();
        split.content.insert_str(0, &split.reasoning);
        self.add_text(&split.content, &mut out);
        for part in split.parts {
            self.call_part(part, &mut out);
        }
        if u.finish.is_some() {
            self.close_message(&mut out);
        }
        out
    }

    /// The finished response, stored when asked.
    fn finish(&mut self, usage: Usage) -> Response {
        let cached = usage.prompt_tokens_details.map_or(0, |d| d.cached_tokens);
        self.response.usage = Some(ResponseUsage {
            input_tokens: usage.prompt_tokens,
            input_tokens_details: InputTokensDetails {
                cached_tokens: cached,
            },
            output_tokens: usage.completion_tokens,
            output_tokens_details: OutputTokensDetails::default(),
            total_tokens: usage.total_tokens,
        });
        if self.response.status == "in_progress" {
            self.response.status = "completed".into();
        }
        let response = self.response.clone();
        if response.store {
            let mut conversation = std::mem::take(&mut self.conversation);
            conversation.extend(output_messages(&response.output));
            self.state.responses().put(Stored {
                response: response.clone(),
                conversation,
            });
        }
        response
    }
}

fn text_part(text: &str) -> OutputContent {
    OutputContent::OutputText {
        text: text.to_owned(),
        annotations: Vec::new(),
        logprobs: Vec::new(),
    }
}

/// Output items as the chat messages a later turn sees: text as assistant messages, calls as
/// an assistant's `tool_calls`.
pub fn output_messages(items: &[OutputItem]) -> Vec<ChatMessage> {
    let mut out: Vec<ChatMessage> = Vec::new();
    for item in items {
        match item {
            OutputItem::Message { content, .. } => {
                let text: String = content
                    .iter()
                    .map(|OutputContent::OutputText { text, .. }| text.as_str())
                    .collect();
                out.push(ChatMessage::new(Role::Assistant, text));
            }
            OutputItem::FunctionCall {
                call_id,
                name,
                arguments,
                ..
            } => {
                let call = ToolCall {
                    id: call_id.clone(),
                    kind: "function".into(),
                    function: FunctionCall {
                        name: name.clone(),
                        arguments: arguments.clone(),
                    },
                };
                match out.last_mut() {
                    Some(m) if m.role == Role::Assistant => {
                        m.tool_calls.get_or_insert_with(Vec::new).push(call)
                    }
                    _ => {
                        let mut m = ChatMessage::new(Role::Assistant, "");
                        m.tool_calls = Some(vec![call]);
                        out.push(m);
                    }
                }
            }
        }
    }
    out
}

impl ChoiceFormatter for Formatter {
    type Response = Response;

    fn opening(&mut self, _num_choices: usize) -> String {
        let created = EventKind::Created {
            response: self.response.clone(),
        };
        let mut out = self.event(created);
        let progress = EventKind::InProgress {
            response: self.response.clone(),
        };
        out.push_str(&self.event(progress));
        out
    }

    fn events(&mut self, u: ChoiceUpdate) -> String {
        let kinds = self.update(&u);
        kinds.into_iter().map(|k| self.event(k)).collect()
    }

    fn closing(&mut self, usage: Usage, _include_usage: bool) -> String {
        let response = self.finish(usage);
        let kind = if response.status == "incomplete" {
            EventKind::Incomplete { response }
        } else {
            EventKind::Completed { response }
        };
        self.event(kind)
    }

    fn error_event(&self, e: &ApiError) -> String {
        let kind = EventKind::Error {
            code: e.body.error.code.clone(),
            message: e.body.error.message.clone(),
            param: e.body.error.param.clone(),
        };
        let event = ResponseEvent {
            sequence_number: self.sequence,
            kind,
        };
        sse::encode_event("error", &event).unwrap_or_else(|_| sse::encode_error(&e.body))
    }

    fn absorb(&mut self, u: ChoiceUpdate) {
        self.update(&u);
    }

    fn response(mut self, usage: Usage) -> Response {
        self.finish(usage)
    }
}
