//! Anthropic's `POST /v1/messages` and `POST /v1/messages/count_tokens`: the request becomes
//! chat messages (`messages_input.rs`) and from there takes the chat path (tools, template,
//! constraint, `ValidRequest`); `messages_output.rs` writes the answer. Errors are Anthropic's.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use pagoda_protocol::Stop;
use pagoda_protocol::anthropic::{CountTokensRequest, CountTokensResponse, MessagesRequest};
use serde_json::{Map, Value};

use crate::api::anthropic::input::{chat_messages, chat_tool_choice, chat_tools};
use crate::api::anthropic::output::Formatter;
use crate::error::ApiError;
use crate::error::rejected::rejected_as;
use crate::error::shape::ErrorShape;
use crate::generate::endpoint::{GenerationEndpoint, Model};
use crate::http::body::JsonBody;
use crate::http::request_id::RequestInfo;
use crate::model::lease::ModelLease;
use crate::prepare::blocking::run_blocking;
use crate::prepare::chat_prompt::{PromptOptions, render, tokenize};
use crate::prepare::constraints;
use crate::prepare::field_policy::{self, Ignored};
use crate::prepare::tools::{self, ToolSetup};
use crate::prepare::valid_request::ValidRequest;
use crate::prepare::validate::{self, SamplingFields};
use crate::prepare::validation_error::{FieldNames, ValidationError};
use crate::state::{AppState, Loaded};

/// A messages request, validated and rendered, with what its answer needs.
pub struct Messages {
    tools: Option<ToolSetup>,
    parallel_tool_calls: bool,
    prompt_text: String,
}

impl GenerationEndpoint for Messages {
    type Wire = MessagesRequest;
    type Formatter = Formatter;
    const ERRORS: ErrorShape = ErrorShape::Anthropic;

    fn prepare(
        state: &AppState,
        model: &ModelLease,
        req: MessagesRequest,
    ) -> Result<(ValidRequest, Self), ValidationError> {
        let loaded = model.generator()?;
        let mut ignored = Ignored::default();
        let policy = state.config().unknown_fields;
        ignored.top_level(policy, &req.extra, MessagesRequest::FIELDS)?;
        let lora = validate::resolve_adapter(model)?;
        validate::refuse("thinking", &req.thinking, "no thinking models are served")?;
        if req
            .service_tier
            .as_deref()
            .is_some_and(|t| t != "auto" && t != "standard_only")
        {
            return Err(ValidationError::invalid_value(
                "service_tier",
                "\"auto\" or \"standard_only\"",
                format!("{:?}", req.service_tier),
            ));
        }
        let user = user_id(req.metadata.as_ref())?;
        if let Some(u) = user {
            tracing::info!(user = u, "messages request");
        }
        if req.max_tokens == 0 {
            return Err(ValidationError::invalid_value(
                "max_tokens",
                "at least 1",
                0,
            ));
        }
        // Anthropic's range, narrower than OpenAI's [0, 2] that `validate::build` checks.
        if let Some(t) = req.temperature
            && !(0.0..=1.0).contains(&t)
        {
            return Err(ValidationError::invalid_value(
                "temperature",
                "in [0, 1]",
                t,
            ));
        }
        let (setup, parallel) = tool_setup(
            loaded,
            req.tools.as_deref(),
            req.tool_choice.as_ref(),
            &mut ignored,
        )?;
        let format = constraints::from_anthropic_output(
            req.output_config.as_ref(),
            req.output_format.as_ref(),
        )?;
        let constraint = constraints::reply(loaded, format, setup.as_ref())?;
        let messages = chat_messages(req.system.as_ref(), &req.messages, &mut ignored)?;
        let prompt_text = render(loaded, &messages, &PromptOptions::NEW_TURN, setup.as_ref())?;
        let prompt = tokenize(loaded, &prompt_text, None);
        let stop = req.stop_sequences.clone().map(Stop::Many);
        if stop
            .as_ref()
            .is_some_and(|s| s.to_vec().iter().any(String::is_empty))
        {
            return Err(ValidationError::invalid(
                "stop_sequences",
                "a list of non-empty strings",
            ));
        }
        let mut f = SamplingFields::new(FieldNames::MESSAGES, Some(req.max_tokens));
        f.lora = lora;
        f.temperature = req.temperature;
        f.top_p = req.top_p;
        f.top_k = req.top_k;
        f.stop = stop.as_ref();
        f.stream = req.stream;
        f.constraint = constraint;
        f.speculative = req.speculative.as_ref();
        let mut request = validate::build(state, loaded, &f, vec![prompt])?;
        request.ignored = ignored;
        Ok((
            request,
            Messages {
                tools: setup,
                parallel_tool_calls: parallel,
                prompt_text,
            },
        ))
    }

    fn formatter(
        self,
        state: &AppState,
        model: &Model<'_>,
        req: &ValidRequest,
        _choices: usize,
    ) -> Formatter {
        Formatter::new(
            state,
            model.name,
            req.prompt(0).len(),
            self.tools.as_ref(),
            self.parallel_tool_calls,
            &self.prompt_text,
        )
    }
}

/// `metadata`: only `user_id`, which is logged with the request.
fn user_id(metadata: Option<&Map<String, Value>>) -> Result<Option<&str>, ValidationError> {
    let Some(m) = metadata else { return Ok(None) };
    field_policy::parameter_keys(m, "metadata", &["user_id"])?;
    match m.get("user_id") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(ValidationError::invalid("metadata.user_id", "a string")),
    }
}

/// The tools of a messages or count_tokens request, through the chat path's `tools::parse`.
fn tool_setup(
    loaded: &Loaded,
    tools: Option<&[Map<String, Value>]>,
    choice: Option<&Map<String, Value>>,
    ignored: &mut Ignored,
) -> Result<(Option<ToolSetup>, bool), ValidationError> {
    let tools = match tools {
        Some(t) => Some(chat_tools(t, ignored)?),
        None => None,
    };
    let (choice, parallel) = match choice {
        Some(c) => {
            let (c, p) = chat_tool_choice(c)?;
            (Some(c), p)
        }
        None => (None, true),
    };
    let setup = tools::parse(loaded, tools.as_ref(), choice.as_ref(), ignored)?;
    Ok((setup, parallel))
}

/// `POST /v1/messages/count_tokens`: the prompt tokens the same messages request would take.
pub async fn count_tokens(
    State(state): State<AppState>,
    info: Option<Extension<RequestInfo>>,
    body: Result<JsonBody<CountTokensRequest>, ApiError>,
) -> Response {
    let ua = RequestInfo::user_agent_of(info);
    let result = match body {
        Ok(JsonBody(req)) => match state.model_for(&req).await {
            Ok(model) => {
                let st = state.clone();
                run_blocking(move || count_blocking(&st, &model, req, ua.as_deref())).await
            }
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
    };
    match result {
        Ok(r) => Json(r).into_response(),
        Err(e) => rejected_as(&state, ErrorShape::Anthropic, e),
    }
}

fn count_blocking(
    state: &AppState,
    model: &ModelLease,
    req: CountTokensRequest,
    user_agent: Option<&str>,
) -> Result<CountTokensResponse, ApiError> {
    let mut ignored = Ignored::default();
    let policy = state.config().unknown_fields;
    ignored.top_level(policy, &req.extra, CountTokensRequest::FIELDS)?;
    validate::refuse("thinking", &req.thinking, "no thinking models are served")?;
    constraints::from_anthropic_output(req.output_config.as_ref(), None)?;
    let loaded = model.generator()?;
    let tools = req.tools.as_deref();
    let (setup, _) = tool_setup(loaded, tools, req.tool_choice.as_ref(), &mut ignored)?;
    let messages = chat_messages(req.system.as_ref(), &req.messages, &mut ignored)?;
    ignored.report(state.metrics(), user_agent);
    let text = render(loaded, &messages, &PromptOptions::NEW_TURN, setup.as_ref())?;
    Ok(CountTokensResponse {
        input_tokens: tokenize(loaded, &text, None).len() as u32,
    })
}
