//! OpenAI's `POST /v1/responses` (and `GET` / `DELETE /v1/responses/{id}` over the store):
//! the stored conversation of `previous_response_id`, `instructions` and the input become chat
//! messages (`responses_input.rs`) and take the chat path (tools, template, constraint,
//! `ValidRequest`); `responses_output.rs` writes the answer.

use axum::Json;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response as HttpResponse};
use pagoda_protocol::responses::{ResponseDeleted, ResponsesRequest};
use pagoda_protocol::{ChatMessage, Role};
use serde_json::{Value, json};

use crate::api::responses::input::{chat_messages, chat_tool_choice, chat_tools, check_extra};
use crate::api::responses::output::Formatter;
use crate::error::ApiError;
use crate::error::rejected::rejected;
use crate::generate::chat_output::ChoiceOutput;
use crate::generate::endpoint::{GenerationEndpoint, Model};
use crate::model::lease::ModelLease;
use crate::prepare::chat_prompt::{PromptOptions, render, tokenize};
use crate::prepare::constraints;
use crate::prepare::field_policy::Ignored;
use crate::prepare::tools;
use crate::prepare::valid_request::ValidRequest;
use crate::prepare::validate::{self, SamplingFields};
use crate::prepare::validation_error::{FieldNames, ValidationError};
use crate::state::AppState;

/// A responses request, validated and rendered, with what its answer needs.
pub struct Responses {
    /// The response object before any output: the request's settings echoed.
    echo: pagoda_protocol::responses::Response,
    /// The messages before this response, without the instructions (what `store` keeps).
    conversation: Vec<ChatMessage>,
    tools: Option<tools::ToolSetup>,
    prompt_text: String,
}

impl GenerationEndpoint for Responses {
    type Wire = ResponsesRequest;
    type Formatter = Formatter;

    fn prepare(
        state: &AppState,
        model: &ModelLease,
        req: ResponsesRequest,
    ) -> Result<(ValidRequest, Self), ValidationError> {
        let mut ignored = Ignored::default();
        check_extra(&req.extra, state.config().unknown_fields, &mut ignored)?;
        let loaded = model.generator()?;
        let lora = validate::resolve_adapter(model)?;
        if let Some(u) = &req.user {
            tracing::info!(user = u.as_str(), "responses request");
        }
        let mut conversation = match &req.previous_response_id {
            Some(id) => {
                let stored =
                    state
                        .responses()
                        .get(id)
                        .ok_or_else(|| ValidationError::NotFound {
                            field: "previous_response_id",
                            message: format!("Previous response with id '{id}' not found."),
                        })?;
                stored.conversation.clone()
            }
            None => Vec::new(),
        };
        let input = req
            .input
            .as_ref()
            .ok_or_else(|| ValidationError::rule("input", "`input` is required"))?;
        chat_messages(input, &mut conversation, &mut ignored)?;
        let mut messages = Vec::with_capacity(conversation.len() + 1);
        if let Some(i) = &req.instructions {
            messages.push(ChatMessage::new(Role::System, i.as_str()));
        }
        messages.extend(conversation.iter().cloned());

        let tools = match req.tools.as_deref() {
            Some(t) => Some(chat_tools(t, &mut ignored)?),
            None => None,
        };
        let choice = req.tool_choice.as_ref().map(chat_tool_choice).transpose()?;
        let setup = tools::parse(loaded, tools.as_ref(), choice.as_ref(), &mut ignored)?;
        let format = match &req.text {
            Some(t) => constraints::from_text_config(t)?.map(|c| (c, "text.format")),
            None => None,
        };
        let constraint = constraints::reply(loaded, format, setup.as_ref())?;
        let prompt_text = render(loaded, &messages, &PromptOptions::NEW_TURN, setup.as_ref())?;
        let prompt = tokenize(loaded, &prompt_text, None);

        let mut f = SamplingFields::new(FieldNames::RESPONSES, req.max_output_tokens);
        f.lora = lora;
        f.temperature = req.temperature;
        f.top_p = req.top_p;
        f.seed = req.seed;
        f.stream = req.stream;
        f.constraint = constraint;
        f.speculative = req.speculative.as_ref();
        let mut request = validate::build(state, loaded, &f, vec![prompt])?;
        request.ignored = ignored;
        let echo = pagoda_protocol::responses::Response {
            id: String::new(),
            object: "response".into(),
            created_at: 0,
            status: "in_progress".into(),
            error: None,
            incomplete_details: None,
            instructions: req.instructions.clone(),
            max_output_tokens: req.max_output_tokens,
            model: req.model.clone(),
            output: Vec::new(),
            parallel_tool_calls: req.parallel_tool_calls.unwrap_or(true),
            previous_response_id: req.previous_response_id.clone(),
            // What the request samples with (its own, the model's or the server's default).
            temperature: Some(request.params().temperature),
            top_p: Some(request.params().top_p),
            tool_choice: req.tool_choice.clone().unwrap_or_else(|| json!("auto")),
            tools: req
                .tools
                .clone()
                .unwrap_or_default()
                .into_iter()
                .map(Value::Object)
                .collect(),
            text: req
                .text
                .clone()
                .map(Value::Object)
                .unwrap_or_else(|| json!({"format": {"type": "text"}})),
            store: req.store.unwrap_or(true),
            metadata: req.metadata.clone().unwrap_or_default(),
            user: req.user.clone(),
            usage: None,
        };
        Ok((
            request,
            Responses {
                echo,
                conversation,
                tools: setup,
                prompt_text,
            },
        ))
    }

    fn formatter(
        self,
        state: &AppState,
        _: &Model<'_>,
        _: &ValidRequest,
        _choices: usize,
    ) -> Formatter {
        let output = ChoiceOutput::new(
            state.config().reasoning_parser,
            self.tools.as_ref(),
            &self.prompt_text,
        )
        .single_call(!self.echo.parallel_tool_calls);
        Formatter::new(state, self.echo, output, self.conversation)
    }
}

fn not_found(id: &str) -> ApiError {
    ValidationError::NotFound {
        field: "response_id",
        message: format!("No response found with id '{id}'."),
    }
    .into()
}

/// `GET /v1/responses/{id}`: a stored response.
pub async fn get(State(state): State<AppState>, Path(id): Path<String>) -> HttpResponse {
    match state.responses().get(&id) {
        Some(s) => Json(&s.response).into_response(),
        None => rejected(&state, not_found(&id)),
    }
}

/// `DELETE /v1/responses/{id}`.
pub async fn delete(State(state): State<AppState>, Path(id): Path<String>) -> HttpResponse {
    if state.responses().delete(&id) {
        Json(ResponseDeleted {
            id,
            object: "response".into(),
            deleted: true,
        })
        .into_response()
    } else {
        rejected(&state, not_found(&id))
    }
}
