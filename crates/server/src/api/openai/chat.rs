//! `POST /v1/chat/completions`: messages through the chat template -> choices; JSON, or SSE
//! chunks in OpenAI's order (role first, content deltas, a finish chunk per choice, the usage
//! chunk when asked, `[DONE]`).

use std::sync::Arc;

use pagoda_protocol::{
    ChatChoice, ChatChunkChoice, ChatCompletionChunk, ChatCompletionRequest,
    ChatCompletionResponse, ChatDelta, ChatLogprobs, ChatMessage, FinishReason, FunctionCallDelta,
    MessageContent, Role, ToolCallDelta, Usage,
};

use pagoda_frontend::Tokenizer;

use crate::api::ids::{now_secs, random_id};
use crate::api::openai::logprobs;
use crate::generate::chat_output::{CallPart, ChoiceOutput, Split};
use crate::generate::endpoint::{GenerationEndpoint, Model};
use crate::generate::generation::ChoiceUpdate;
use crate::generate::stream::{self as sse, ChoiceFormatter};
use crate::model::lease::ModelLease;
use crate::prepare::chat_prompt::{PromptOptions, content_text, render, tokenize};
use crate::prepare::constraints;
use crate::prepare::field_policy::Ignored;
use crate::prepare::tools::{self, ToolSetup};
use crate::prepare::valid_request::ValidRequest;
use crate::prepare::validate;
use crate::prepare::validation_error::{FieldNames, ValidationError};
use crate::state::AppState;

/// A chat request, validated and rendered, with what its response needs.
pub struct Chat {
    logprobs: bool,
    /// With `echo`: the final assistant message's text, put before the output.
    echo_text: Option<String>,
    /// The request's tools, when it has any: how the reply's calls are parsed.
    tools: Option<ToolSetup>,
    /// `parallel_tool_calls: false`: the reply ends at its first call.
    single_call: bool,
    prompt_text: String,
}

impl GenerationEndpoint for Chat {
    type Wire = ChatCompletionRequest;
    type Formatter = Formatter;

    fn prepare(
        state: &AppState,
        model: &ModelLease,
        req: ChatCompletionRequest,
    ) -> Result<(ValidRequest, Self), ValidationError> {
        prepare(state, model, req)
    }

    fn formatter(
        self,
        state: &AppState,
        model: &Model<'_>,
        _: &ValidRequest,
        num_choices: usize,
    ) -> Formatter {
        Formatter {
            tokenizer: Arc::clone(&model.loaded.tokenizer),
            id: random_id("chatcmpl"),
            created: now_secs(),
            model: model.name.to_owned(),
            logprobs: self.logprobs,
            echo_text: self.echo_text,
            echoed: vec![false; num_choices],
            outputs: (0..num_choices)
                .map(|_| {
                    ChoiceOutput::new(
                        state.config().reasoning_parser,
                        self.tools.as_ref(),
                        &self.prompt_text,
                    )
                    .single_call(self.single_call)
                })
                .collect(),
            named_tool: self.tools.as_ref().is_some_and(ToolSetup::is_named),
            prompt_logprobs: None,
            whole: Whole::new(num_choices, self.logprobs),
        }
    }
}

fn prepare(
    state: &AppState,
    model: &ModelLease,
    req: ChatCompletionRequest,
) -> Result<(ValidRequest, Chat), ValidationError> {
    let loaded = model.generator()?;
    let mut ignored = Ignored::default();
    let policy = state.config().unknown_fields;
    ignored.top_level(policy, &req.extra, ChatCompletionRequest::FIELDS)?;
    ignored.messages(&req.messages);
    let lora = validate::resolve_adapter(model)?;
    let later = "not supported yet";
    validate::refuse(
        "functions",
        &req.functions,
        "deprecated by OpenAI; use `tools`",
    )?;
    validate::refuse(
        "function_call",
        &req.function_call,
        "deprecated by OpenAI; use `tool_choice`",
    )?;
    let tools = tools::parse(
        loaded,
        req.tools.as_ref(),
        req.tool_choice.as_ref(),
        &mut ignored,
    )?;
    let requested = constraints::requested(
        req.response_format.as_ref(),
        req.structured_outputs.as_ref(),
    )?;
    let constraint = constraints::reply(loaded, requested, tools.as_ref())?;
    if req.store == Some(true) {
        return Err(ValidationError::unsupported(
            "store",
            "pagoda does not store completions",
        ));
    }
    if req
        .service_tier
        .as_deref()
        .is_some_and(|t| t != "auto" && t != "default")
    {
        return Err(ValidationError::unsupported(
            "service_tier",
            "only \"auto\" and \"default\"",
        ));
    }
    validate::refuse(
        "reasoning_effort",
        &req.reasoning_effort,
        "not a reasoning model",
    )?;
    if req
        .modalities
        .as_ref()
        .is_some_and(|m| m.iter().any(|x| x != "text"))
    {
        return Err(ValidationError::unsupported(
            "modalities",
            "only text output",
        ));
    }
    validate::refuse("audio", &req.audio, "only text output")?;
    validate::refuse("prediction", &req.prediction, later)?;
    validate::refuse(
        "web_search_options",
        &req.web_search_options,
        "no web search",
    )?;
    if req.prompt_logprobs.is_some() && req.stream == Some(true) {
        return Err(ValidationError::Conflict {
            field: "prompt_logprobs",
            with: "`stream: true` (prompt logprobs come with the whole response)",
        });
    }
    validate::refuse(
        "chat_template",
        &req.chat_template,
        "a per-request template is not supported; start the server with --chat-template",
    )?;
    log_user(req.user.as_deref(), req.metadata.as_ref())?;
    validate::refuse(
        "spaces_between_special_tokens",
        &req.spaces_between_special_tokens,
        "not supported",
    )?;
    let logprobs = req.logprobs.unwrap_or(false);
    let top = match (logprobs, req.top_logprobs) {
        (false, Some(_)) => {
            return Err(ValidationError::rule(
                "top_logprobs",
                "`top_logprobs` needs `logprobs: true`",
            ));
        }
        (true, t) => Some(t.unwrap_or(0)),
        (false, None) => None,
    };
    let opts = PromptOptions::new(
        req.add_generation_prompt,
        req.continue_final_message,
        req.chat_template_kwargs.as_ref(),
    )?;
    let prompt_text = render(loaded, &req.messages, &opts, tools.as_ref())?;
    let prompt = tokenize(loaded, &prompt_text, req.add_special_tokens);
    let echo_text = match (req.echo.unwrap_or(false), req.messages.last()) {
        (true, Some(m)) if m.role == Role::Assistant => match &m.content {
            Some(c) => Some(content_text(req.messages.len() - 1, c)?),
            None => None,
        },
        _ => None,
    };
    let (max_tokens, field) = match (req.max_completion_tokens, req.max_tokens) {
        (Some(m), _) => (Some(m), "max_completion_tokens"),
        (None, m) => (m, "max_tokens"),
    };
    let mut fields = validate::sampling_fields!(
        &req,
        names: FieldNames::chat(field),
        max_tokens: max_tokens,
        logprobs: top,
    );
    fields.constraint = constraint;
    fields.lora = lora;
    fields.prompt_logprobs = req.prompt_logprobs;
    let mut request = validate::build(state, loaded, &fields, vec![prompt])?;
    request.ignored = ignored;
    Ok((
        request,
        Chat {
            logprobs,
            echo_text,
            single_call: req.parallel_tool_calls == Some(false),
            tools,
            prompt_text,
        },
    ))
}

/// `user` and `metadata` (OpenAI: at most 16 string values) are logged with the request;
/// chat completions are not stored, so `metadata` is not returned.
fn log_user(
    user: Option<&str>,
    metadata: Option<&serde_json::Value>,
) -> Result<(), ValidationError> {
    if let Some(m) = metadata {
        let ok = m
            .as_object()
            .is_some_and(|o| o.len() <= 16 && o.values().all(serde_json::Value::is_string));
        if !ok {
            return Err(ValidationError::invalid(
                "metadata",
                "an object of at most 16 string values",
            ));
        }
    }
    if user.is_some() || metadata.is_some() {
        tracing::info!(
            user = user.unwrap_or(""),
            metadata = %metadata.map(ToString::to_string).unwrap_or_default(),
            "chat completion request"
        );
    }
    Ok(())
}

/// The chat response's writer: SSE chunks, or the whole response gathered in `whole`.
pub struct Formatter {
    tokenizer: Arc<Tokenizer>,
    id: String,
    created: u64,
    model: String,
    logprobs: bool,
    echo_text: Option<String>,
    echoed: Vec<bool>,
    /// Per choice: reasoning and tool-call parsing of the text.
    outputs: Vec<ChoiceOutput>,
    /// `tool_choice` named the function: a call is the requested reply, `finish_reason: stop`.
    named_tool: bool,
    /// vLLM's `prompt_logprobs`, from the first update that carries them.
    prompt_logprobs: Option<Vec<Option<pagoda_protocol::PromptLogprobs>>>,
    whole: Whole,
}

/// The non-stream response as it is gathered.
struct Whole {
    choices: Vec<ChatChoice>,
    reasoning: Vec<String>,
    calls: Vec<Vec<pagoda_protocol::ToolCall>>,
}

impl Whole {
    fn new(num_choices: usize, logprobs: bool) -> Self {
        Self {
            choices: (0..num_choices as u32)
                .map(|index| ChatChoice {
                    index,
                    message: ChatMessage::new(Role::Assistant, ""),
                    logprobs: logprobs.then(|| ChatLogprobs {
                        content: Some(Vec::new()),
                    }),
                    finish_reason: None,
                    stop_reason: None,
                })
                .collect(),
            reasoning: vec![String::new(); num_choices],
            calls: vec![Vec::new(); num_choices],
        }
    }
}

impl Formatter {
    /// The update's text split into content (echo first), reasoning and calls (the parsers
    /// flushed when the choice ends), its logprobs, and the finish reason: `tool_calls` when
    /// the choice called tools and stopped on its own (`stop` for a named `tool_choice`, as
    /// OpenAI reports it).
    fn parts(&mut self, u: &ChoiceUpdate) -> (Split, Option<ChatLogprobs>, Option<FinishReason>) {
        let i = u.index as usize;
        let mut split = self.outputs[i].push(&u.text);
        if u.finish.is_some() {
            let tail = self.outputs[i].finish();
            split.extend(tail);
        }
        if let Some(e) = &self.echo_text
            && !self.echoed[i]
        {
            self.echoed[i] = true;
            split.content.insert_str(0, e);
        }
        let lp = self
            .logprobs
            .then(|| logprobs::chat(&self.tokenizer, &u.logprobs));
        let finish = u.finish.as_ref().map(|f| match f.reason {
            FinishReason::Stop if self.outputs[i].num_calls() > 0 && !self.named_tool => {
                FinishReason::ToolCalls
            }
            r => r,
        });
        (split, lp, finish)
    }

    fn chunk(&self, choices: Vec<ChatChunkChoice>, usage: Option<Usage>) -> ChatCompletionChunk {
        ChatCompletionChunk {
            id: self.id.clone(),
            object: ChatCompletionChunk::OBJECT.to_owned(),
            created: self.created,
            model: self.model.clone(),
            choices,
            usage,
            system_fingerprint: None,
            service_tier: None,
        }
    }

    /// The SSE events of one update: a content / reasoning chunk if it adds text, a chunk per
    /// tool-call part (id, type and name when a call starts; then each piece of its arguments
    /// as generated), a finish chunk if it ends.
    fn update_events(&mut self, u: ChoiceUpdate) -> String {
        let (split, lp, finish) = self.parts(&u);
        let mut out = String::new();
        let has_lp = lp
            .as_ref()
            .is_some_and(|l| l.content.as_ref().is_some_and(|c| !c.is_empty()));
        if !split.content.is_empty() || !split.reasoning.is_empty() || has_lp {
            let delta = ChatDelta {
                content: (!split.content.is_empty() || split.reasoning.is_empty())
                    .then_some(split.content),
                reasoning_content: (!split.reasoning.is_empty()).then_some(split.reasoning),
                ..Default::default()
            };
            let choice = chunk_choice(u.index, delta, lp, None);
            out.push_str(&sse::data(&self.chunk(vec![choice], None)));
        }
        for part in split.parts {
            let piece = match part {
                CallPart::Start { index, id, name } => ToolCallDelta {
                    index,
                    id: Some(id),
                    kind: Some("function".to_owned()),
                    function: Some(FunctionCallDelta {
                        name: Some(name),
                        arguments: Some(String::new()),
                    }),
                },
                CallPart::Arguments { index, text } => ToolCallDelta {
                    index,
                    id: None,
                    kind: None,
                    function: Some(FunctionCallDelta {
                        name: None,
                        arguments: Some(text),
                    }),
                },
                CallPart::End { .. } => continue,
            };
            let delta = ChatDelta {
                tool_calls: Some(vec![piece]),
                ..Default::default()
            };
            out.push_str(&sse::data(
                &self.chunk(vec![chunk_choice(u.index, delta, None, None)], None),
            ));
        }
        if let (Some(f), Some(reason)) = (u.finish, finish) {
            let mut choice = chunk_choice(u.index, ChatDelta::default(), None, Some(reason));
            choice.stop_reason = f.stop_reason;
            out.push_str(&sse::data(&self.chunk(vec![choice], None)));
        }
        out
    }
}

fn chunk_choice(
    index: u32,
    delta: ChatDelta,
    logprobs: Option<ChatLogprobs>,
    finish_reason: Option<FinishReason>,
) -> ChatChunkChoice {
    ChatChunkChoice {
        index,
        delta,
        logprobs,
        finish_reason,
        stop_reason: None,
    }
}

impl ChoiceFormatter for Formatter {
    type Response = ChatCompletionResponse;

    /// One role chunk per choice, first (OpenAI's order).
    fn opening(&mut self, num_choices: usize) -> String {
        let mut out = String::new();
        for index in 0..num_choices as u32 {
            let delta = ChatDelta {
                role: Some(Role::Assistant),
                content: Some(String::new()),
                ..Default::default()
            };
            out.push_str(&sse::data(
                &self.chunk(vec![chunk_choice(index, delta, None, None)], None),
            ));
        }
        out
    }

    fn events(&mut self, u: ChoiceUpdate) -> String {
        self.update_events(u)
    }

    fn usage_event(&self, usage: Usage) -> String {
        sse::data(&self.chunk(Vec::new(), Some(usage)))
    }

    fn absorb(&mut self, u: ChoiceUpdate) {
        if let (None, Some(plp)) = (&self.prompt_logprobs, u.prompt_logprobs.as_deref()) {
            self.prompt_logprobs = Some(logprobs::prompt(&self.tokenizer, plp));
        }
        let (split, lp, finish) = self.parts(&u);
        let i = u.index as usize;
        let w = &mut self.whole;
        let c = &mut w.choices[i];
        if let Some(MessageContent::Text(t)) = c.message.content.as_mut() {
            t.push_str(&split.content);
        }
        w.reasoning[i].push_str(&split.reasoning);
        w.calls[i].extend(split.calls.into_iter().map(|(_, call)| call));
        if let (Some(all), Some(new)) = (
            c.logprobs.as_mut().and_then(|l| l.content.as_mut()),
            lp.and_then(|l| l.content),
        ) {
            all.extend(new);
        }
        if let (Some(f), Some(reason)) = (u.finish, finish) {
            c.finish_reason = Some(reason);
            c.stop_reason = f.stop_reason;
        }
    }

    fn response(self, usage: Usage) -> ChatCompletionResponse {
        let Whole {
            mut choices,
            reasoning,
            calls,
        } = self.whole;
        for ((c, r), calls) in choices.iter_mut().zip(reasoning).zip(calls) {
            if !r.is_empty() {
                c.message.reasoning_content = Some(r);
            }
            if !calls.is_empty() {
                // OpenAI: content is null when the reply is only calls.
                if matches!(&c.message.content, Some(MessageContent::Text(t)) if t.is_empty()) {
                    c.message.content = None;
                }
                c.message.tool_calls = Some(calls);
            }
        }
        ChatCompletionResponse {
            id: self.id,
            object: "chat.completion".to_owned(),
            created: self.created,
            model: self.model,
            choices,
            usage: Some(usage),
            system_fingerprint: None,
            service_tier: None,
            prompt_logprobs: self.prompt_logprobs,
        }
    }
}
