//! vLLM's `POST /tokenize` (a `prompt` or llama.cpp's `content`, or `messages` and `tools`
//! through the chat template exactly as the generation endpoints tokenize them) and
//! `POST /detokenize`. llama.cpp's `add_special` is `add_special_tokens` by its other name.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use pagoda_protocol::{DetokenizeRequest, DetokenizeResponse, TokenizeRequest, TokenizeResponse};

use crate::error::ApiError;
use crate::error::rejected::rejected;
use crate::generate::generation::token_text;
use crate::http::body::JsonBody;
use crate::http::request_id::RequestInfo;
use crate::model::lease::ModelLease;
use crate::prepare::blocking::run_blocking;
use crate::prepare::chat_prompt::{self, PromptOptions, render};
use crate::prepare::field_policy::Ignored;
use crate::prepare::tools;
use crate::prepare::validation_error::ValidationError;
use crate::state::AppState;

pub async fn tokenize(
    State(state): State<AppState>,
    info: Option<Extension<RequestInfo>>,
    JsonBody(req): JsonBody<TokenizeRequest>,
) -> Response {
    let ua = RequestInfo::user_agent_of(info);
    let model = match state.model_for(&req).await {
        Ok(m) => m,
        Err(e) => return rejected(&state, e),
    };
    let st = state.clone();
    match run_blocking(move || tokenize_blocking(&st, &model, req, ua)).await {
        Ok(r) => Json(r).into_response(),
        Err(e) => rejected(&state, e),
    }
}

fn tokenize_blocking(
    state: &AppState,
    model: &ModelLease,
    req: TokenizeRequest,
    user_agent: Option<String>,
) -> Result<TokenizeResponse, ApiError> {
    let mut ignored = Ignored::default();
    let policy = state.config().unknown_fields;
    ignored.top_level(policy, &req.extra, TokenizeRequest::FIELDS)?;
    let loaded = model.generator()?;
    // vLLM's default adds special tokens to a `prompt`, llama.cpp's none to a `content`; a
    // client written for both sends both names, with the same text.
    let text = match (&req.prompt, &req.content) {
        (Some(p), None) => Some((p, true)),
        (None, Some(c)) => Some((c, false)),
        (None, None) => None,
        (Some(p), Some(c)) if p == c => Some((p, true)),
        (Some(_), Some(_)) => {
            return Err(ValidationError::rule(
                "content",
                "`prompt` and `content` are two names for the text to tokenize; give one, or both with the same text",
            )
            .into());
        }
    };
    let add_special = match (req.add_special_tokens, req.add_special) {
        (Some(a), Some(b)) if a != b => {
            return Err(ValidationError::rule(
                "add_special",
                "`add_special` (llama.cpp) and `add_special_tokens` (vLLM) name one setting; they disagree",
            )
            .into());
        }
        (a, b) => a.or(b),
    };
    let tokens = match (text, &req.messages) {
        (Some((text, default_special)), None) => {
            if req.add_generation_prompt.is_some()
                || req.continue_final_message.is_some()
                || req.chat_template_kwargs.is_some()
                || req.tools.is_some()
            {
                return Err(ValidationError::rule(
                    if req.tools.is_some() {
                        "tools"
                    } else {
                        "add_generation_prompt"
                    },
                    "`add_generation_prompt`, `continue_final_message`, `chat_template_kwargs` and `tools` go with `messages`",
                )
                .into());
            }
            loaded
                .tokenizer
                .encode(text, add_special.unwrap_or(default_special), true)
        }
        (None, Some(msgs)) => {
            let opts = PromptOptions::new(
                req.add_generation_prompt,
                req.continue_final_message,
                req.chat_template_kwargs.as_ref(),
            )?;
            // The same parse and render as a chat request, so the two counts agree.
            ignored.messages(msgs);
            let setup = tools::parse(loaded, req.tools.as_ref(), None, &mut ignored)?;
            let text = render(loaded, msgs, &opts, setup.as_ref())?;
            chat_prompt::tokenize(loaded, &text, add_special)
        }
        _ => {
            return Err(ValidationError::rule(
                "prompt",
                "give exactly one of `prompt`, `content` and `messages`",
            )
            .into());
        }
    };
    ignored.report(state.metrics(), user_agent.as_deref());
    let token_strs = req.return_token_strs.unwrap_or(false).then(|| {
        tokens
            .iter()
            .map(|&t| token_text(&loaded.tokenizer, t).0)
            .collect()
    });
    Ok(TokenizeResponse {
        count: tokens.len() as u32,
        max_model_len: Some(loaded.engine.max_model_len() as u32),
        tokens,
        token_strs,
    })
}

pub async fn detokenize(
    State(state): State<AppState>,
    JsonBody(req): JsonBody<DetokenizeRequest>,
) -> Response {
    let model = match state.model_for(&req).await {
        Ok(m) => m,
        Err(e) => return rejected(&state, e),
    };
    let result = (|| {
        let policy = state.config().unknown_fields;
        Ignored::default().top_level(policy, &req.extra, DetokenizeRequest::FIELDS)?;
        let loaded = model.generator()?;
        if let Some(&bad) = req
            .tokens
            .iter()
            .find(|&&t| t as usize >= loaded.engine.limits().vocab_size)
        {
            return Err(ValidationError::rule(
                "tokens",
                format!(
                    "token id {bad} is outside the vocabulary of {} tokens",
                    loaded.engine.limits().vocab_size
                ),
            )
            .into());
        }
        Ok(DetokenizeResponse {
            prompt: loaded.tokenizer.decode(&req.tokens, false),
        })
    })();
    match result {
        Ok(r) => Json(r).into_response(),
        Err(e) => rejected(&state, e),
    }
}
