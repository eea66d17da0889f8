//! Protocol request -> `GenRequest`, the validated form the generation code runs: every field
//! of the request surface is either turned into engine parameters or refused with a 400 that
//! names it; unknown keys are refused by name. Nothing here talks to the engine.

use std::collections::BTreeMap;

use pagoda_core::SamplingParams;
use pagoda_protocol::Stop;
use serde_json::{Map, Value};

use crate::error::ApiError;
use crate::state::{AppState, Loaded};

/// A request ready to submit: token prompts plus everything the text edge needs.
#[derive(Clone, Debug)]
pub struct GenRequest {
    /// One token list per prompt; choices are indexed prompt-major (`prompt * n + i`).
    pub prompts: Vec<Vec<u32>>,
    /// Engine parameters of one choice (`n` is 1: each choice is its own engine request, so a
    /// stop string in one does not end the others).
    pub params: SamplingParams,
    pub n: u32,
    pub stop: Vec<String>,
    pub skip_special_tokens: bool,
    pub include_stop_str_in_output: bool,
    pub priority: i32,
    /// The effective prefix-cache salt (tenant-derived with `--api-key`).
    pub cache_salt: Option<String>,
    pub stream: bool,
    pub include_usage: bool,
}

/// The sampling fields both endpoints share, borrowed from either request type.
pub struct SamplingFields<'a> {
    /// Chat (`messages`, `top_logprobs`) or completions (`prompt`, `logprobs`) field names.
    pub chat: bool,
    /// `None`: fill the context, as vLLM does for chat.
    pub max_tokens: Option<u32>,
    /// Which field `max_tokens` came from (`max_tokens` or `max_completion_tokens`).
    pub max_tokens_field: &'static str,
    /// Top alternatives per token, when logprobs were asked for.
    pub logprobs: Option<u32>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<i32>,
    pub min_p: Option<f32>,
    pub seed: Option<u64>,
    pub presence_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
    pub repetition_penalty: Option<f32>,
    pub logit_bias: Option<&'a BTreeMap<String, f32>>,
    pub stop_token_ids: Option<&'a Vec<u32>>,
    pub ignore_eos: Option<bool>,
    pub min_tokens: Option<u32>,
    pub n: Option<u32>,
    pub stop: Option<&'a Stop>,
    pub priority: Option<i32>,
    pub cache_salt: Option<&'a String>,
    pub skip_special_tokens: Option<bool>,
    pub include_stop_str_in_output: Option<bool>,
    pub stream: Option<bool>,
    pub include_usage: Option<bool>,
    pub continuous_usage_stats: Option<bool>,
}

/// A [`SamplingFields`] over `$req`, a chat or completions request: the fields both types name
/// alike are borrowed by name, and the four that differ are given.
macro_rules! sampling_fields {
    ($req:expr, chat: $chat:expr, max_tokens: $max:expr, max_tokens_field: $field:expr,
     logprobs: $logprobs:expr $(,)?) => {{
        let req = $req;
        $crate::validate::SamplingFields {
            chat: $chat,
            max_tokens: $max,
            max_tokens_field: $field,
            logprobs: $logprobs,
            temperature: req.temperature,
            top_p: req.top_p,
            top_k: req.top_k,
            min_p: req.min_p,
            seed: req.seed,
            presence_penalty: req.presence_penalty,
            frequency_penalty: req.frequency_penalty,
            repetition_penalty: req.repetition_penalty,
            logit_bias: req.logit_bias.as_ref(),
            stop_token_ids: req.stop_token_ids.as_ref(),
            ignore_eos: req.ignore_eos,
            min_tokens: req.min_tokens,
            n: req.n,
            stop: req.stop.as_ref(),
            priority: req.priority,
            cache_salt: req.cache_salt.as_ref(),
            skip_special_tokens: req.skip_special_tokens,
            include_stop_str_in_output: req.include_stop_str_in_output,
            stream: req.stream,
            include_usage: req.stream_options.as_ref().and_then(|o| o.include_usage),
            continuous_usage_stats: req
                .stream_options
                .as_ref()
                .and_then(|o| o.continuous_usage_stats),
        }
    }};
}
pub(crate) use sampling_fields;

/// 400 for the first key the endpoint does not know.
pub fn reject_unknown(extra: &Map<String, Value>) -> Result<(), ApiError> {
    match extra.keys().next() {
        Some(k) => Err(ApiError::unknown_field(k)),
        None => Ok(()),
    }
}

/// 404 unless `model` is the served name.
pub fn check_model(state: &AppState, model: &str) -> Result<(), ApiError> {
    if model == state.config().served_model_name {
        Ok(())
    } else {
        Err(ApiError::model_not_found(model))
    }
}

/// 400 "not supported yet" when `value` is present (and not its no-op form).
pub fn refuse<T>(name: &str, value: &Option<T>, why: &str) -> Result<(), ApiError> {
    match value {
        Some(_) => Err(ApiError::unsupported(name, why)),
        None => Ok(()),
    }
}

/// Builds the validated request from the shared fields and the prompts' tokens.
pub fn build(
    state: &AppState,
    loaded: &Loaded,
    f: &SamplingFields<'_>,
    prompts: Vec<Vec<u32>>,
) -> Result<GenRequest, ApiError> {
    let (max_tokens, max_tokens_field, logprobs) = (f.max_tokens, f.max_tokens_field, f.logprobs);
    let prompt_field = if f.chat { "messages" } else { "prompt" };
    let stream = f.stream.unwrap_or(false);
    if !stream && (f.include_usage.is_some() || f.continuous_usage_stats.is_some()) {
        return Err(ApiError::invalid(
            "stream_options",
            "`stream_options` is only allowed when `stream` is true",
        ));
    }
    if f.continuous_usage_stats == Some(true) {
        return Err(ApiError::unsupported(
            "stream_options.continuous_usage_stats",
            "not supported yet",
        ));
    }
    let top_k = match f.top_k {
        None | Some(-1) | Some(0) => 0,
        Some(k) if k > 0 => k as u32,
        Some(k) => {
            return Err(ApiError::invalid(
                "top_k",
                format!("`top_k` must be -1 (off) or a positive number, got {k}"),
            ));
        }
    };
    let mut logit_bias = Vec::new();
    for (key, &bias) in f.logit_bias.into_iter().flatten() {
        let id: u32 = key.parse().map_err(|_| {
            ApiError::invalid(
                "logit_bias",
                format!("`logit_bias` keys must be token ids, got {key:?}"),
            )
        })?;
        logit_bias.push((id, bias));
    }
    let stop = f.stop.map(Stop::to_vec).unwrap_or_default();
    if stop.iter().any(String::is_empty) {
        return Err(ApiError::invalid(
            "stop",
            "`stop` strings must not be empty",
        ));
    }
    if let Some(p) = f.priority
        && p != 0
        && !loaded.priority_scheduling
    {
        return Err(ApiError::invalid(
            "priority",
            "`priority` needs the server to run with --priority-scheduling",
        ));
    }
    if prompts.is_empty() {
        return Err(ApiError::invalid(
            prompt_field,
            format!("`{prompt_field}` must not be empty"),
        ));
    }
    let mut params = SamplingParams {
        temperature: f.temperature.unwrap_or(1.0),
        top_k,
        top_p: f.top_p.unwrap_or(1.0),
        min_p: f.min_p.unwrap_or(0.0),
        seed: f.seed,
        max_tokens: max_tokens.unwrap_or(1),
        stop_token_ids: f.stop_token_ids.cloned().unwrap_or_default(),
        ignore_eos: f.ignore_eos.unwrap_or(false),
        logprobs,
        presence_penalty: f.presence_penalty.unwrap_or(0.0),
        frequency_penalty: f.frequency_penalty.unwrap_or(0.0),
        repetition_penalty: f.repetition_penalty.unwrap_or(1.0),
        logit_bias,
        min_tokens: f.min_tokens.unwrap_or(0),
        n: f.n.unwrap_or(1),
        prompt_logprobs: None,
        constraint: None,
    };
    // OpenAI's temperature range; the engine accepts more, clients expect this bound.
    if !(0.0..=2.0).contains(&params.temperature) {
        return Err(ApiError::invalid(
            "temperature",
            format!(
                "`temperature` must be in [0, 2], got {}",
                params.temperature
            ),
        ));
    }
    let sampling_err = |e: pagoda_core::SamplingParamsError| {
        let field = match e.field() {
            "max_tokens" => max_tokens_field,
            "logprobs" if f.chat => "top_logprobs",
            other => other,
        };
        ApiError::invalid(
            field,
            e.to_string()
                .replace("`max_tokens`", &format!("`{max_tokens_field}`")),
        )
    };
    let max_len = loaded.max_model_len;
    for (i, p) in prompts.iter().enumerate() {
        if p.is_empty() {
            return Err(ApiError::invalid(
                prompt_field,
                format!("`{prompt_field}` #{i} has no tokens"),
            ));
        }
        if let Some(&bad) = p.iter().find(|&&t| t as usize >= loaded.vocab_size) {
            return Err(ApiError::invalid(
                prompt_field,
                format!(
                    "token id {bad} is outside the vocabulary of {} tokens",
                    loaded.vocab_size
                ),
            ));
        }
        if p.len() >= max_len {
            return Err(ApiError::invalid(
                prompt_field,
                format!(
                    "this model's maximum context length is {max_len} tokens, and the prompt has {} tokens (at least one token must be left to generate)",
                    p.len()
                ),
            ));
        }
        let room = (max_len - p.len()) as u32;
        match max_tokens {
            Some(m) if p.len() + m as usize > max_len => {
                return Err(ApiError::invalid(
                    max_tokens_field,
                    format!(
                        "this model's maximum context length is {max_len} tokens; the prompt has {} tokens and `{max_tokens_field}` is {m}: {} exceeds it",
                        p.len(),
                        p.len() + m as usize
                    ),
                ));
            }
            Some(_) => {}
            None => {
                params.max_tokens = if i == 0 {
                    room
                } else {
                    params.max_tokens.min(room)
                }
            }
        }
    }
    params.validate().map_err(sampling_err)?;
    params
        .validate_against_vocab(loaded.vocab_size)
        .map_err(sampling_err)?;
    let n = params.n;
    params.n = 1;
    let cache_salt = match (state.tenant_salt(), f.cache_salt) {
        (Some(t), Some(s)) => Some(format!("{t}/{s}")),
        (Some(t), None) => Some(t.to_owned()),
        (None, s) => s.cloned(),
    };
    Ok(GenRequest {
        prompts,
        params,
        n,
        stop,
        skip_special_tokens: f.skip_special_tokens.unwrap_or(true),
        include_stop_str_in_output: f.include_stop_str_in_output.unwrap_or(false),
        priority: f.priority.unwrap_or(0),
        cache_salt,
        stream,
        include_usage: f.include_usage.unwrap_or(false),
    })
}
