//! Protocol request -> `ValidRequest`, for every generation endpoint: the fields the APIs share
//! are turned into engine parameters or refused with a `ValidationError` that names them
//! (unknown keys: `field_policy`). Nothing here talks to the engine.

use std::collections::BTreeMap;

use pagoda_core::SamplingParams;
use pagoda_protocol::Stop;
use serde_json::{Map, Value};

use crate::model::lease::ModelLease;
use crate::prepare::valid_request::{TextOptions, Unchecked, ValidRequest};
use crate::prepare::validation_error::{FieldNames, ValidationError};
use crate::state::{AppState, Loaded};

/// The sampling fields both endpoints share, borrowed from either request type.
pub struct SamplingFields<'a> {
    /// The API's names for the prompt, `max_tokens` (the field it came from) and logprobs.
    pub names: FieldNames,
    /// `None`: fill the context, as vLLM does for chat.
    pub max_tokens: Option<u32>,
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
    /// Set by the endpoint (completions' `echo` with `logprobs`).
    pub prompt_logprobs: Option<u32>,
    /// The compiled structured-output constraint, when the request has one.
    pub constraint: Option<pagoda_core::ConstraintRef>,
    /// The adapter the request's `model` names (`resolve_adapter`), `None` for the base model.
    pub lora: Option<pagoda_core::LoraRef>,
    /// Prefill/decode disaggregation (`crate::prepare::kv_transfer::parse`).
    pub kv_transfer_params: Option<&'a Value>,
    /// The request's speculative decoding (`crate::prepare::speculative::parse`).
    pub speculative: Option<&'a Value>,
}

/// A [`SamplingFields`] over `$req`, a chat or completions request: the fields both types name
/// alike are borrowed by name, and the three that differ are given.
macro_rules! sampling_fields {
    ($req:expr, names: $names:expr, max_tokens: $max:expr, logprobs: $logprobs:expr $(,)?) => {{
        let req = $req;
        $crate::prepare::validate::SamplingFields {
            names: $names,
            max_tokens: $max,
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
            prompt_logprobs: None,
            constraint: None,
            lora: None,
            kv_transfer_params: req.kv_transfer_params.as_ref(),
            speculative: req.speculative.as_ref(),
        }
    }};
}
pub(crate) use sampling_fields;

impl SamplingFields<'_> {
    /// Nothing set: for APIs (Messages, Responses) that fill in the few fields they have.
    pub fn new(names: FieldNames, max_tokens: Option<u32>) -> Self {
        Self {
            names,
            max_tokens,
            logprobs: None,
            temperature: None,
            top_p: None,
            top_k: None,
            min_p: None,
            seed: None,
            presence_penalty: None,
            frequency_penalty: None,
            repetition_penalty: None,
            logit_bias: None,
            stop_token_ids: None,
            ignore_eos: None,
            min_tokens: None,
            n: None,
            stop: None,
            priority: None,
            cache_salt: None,
            skip_special_tokens: None,
            include_stop_str_in_output: None,
            stream: None,
            include_usage: None,
            continuous_usage_stats: None,
            prompt_logprobs: None,
            constraint: None,
            lora: None,
            kv_transfer_params: None,
            speculative: None,
        }
    }
}

/// The string `key` of the JSON object at `field`.
pub fn str_field<'a>(
    b: &'a Map<String, Value>,
    field: &str,
    key: &str,
) -> Result<&'a str, ValidationError> {
    b.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| ValidationError::invalid(format!("{field}.{key}"), "a string"))
}

/// The LoRA adapter the request's `model` selected (`None`: the base model), read back from
/// disk when it was evicted. The one place `model` picks an adapter (the registry found the
/// name among the default model's adapters).
pub fn resolve_adapter(
    model: &ModelLease,
) -> Result<Option<pagoda_core::LoraRef>, ValidationError> {
    let Some(name) = model.adapter() else {
        return Ok(None);
    };
    match model.generator()?.loras.resolve(name) {
        Ok(l) => Ok(Some(l)),
        Err(crate::model::loras::LoraServeError::NotFound(_)) => {
            Err(ValidationError::ModelNotFound {
                model: name.to_owned(),
            })
        }
        Err(e) => Err(ValidationError::NotFound {
            field: "model",
            message: e.to_string(),
        }),
    }
}

/// "Not supported" when `value` is present.
pub fn refuse<T>(name: &str, value: &Option<T>, why: &'static str) -> Result<(), ValidationError> {
    match value {
        Some(_) => Err(ValidationError::unsupported(name, why)),
        None => Ok(()),
    }
}

/// Builds the validated request from the shared fields and the prompts' tokens.
pub fn build(
    state: &AppState,
    loaded: &Loaded,
    f: &SamplingFields<'_>,
    prompts: Vec<Vec<u32>>,
) -> Result<ValidRequest, ValidationError> {
    let stream = f.stream.unwrap_or(false);
    if !stream && (f.include_usage.is_some() || f.continuous_usage_stats.is_some()) {
        return Err(ValidationError::Requires {
            field: "stream_options",
            needs: "`stream: true`",
        });
    }
    if f.continuous_usage_stats == Some(true) {
        return Err(ValidationError::unsupported(
            "stream_options.continuous_usage_stats",
            "not supported yet",
        ));
    }
    // The one place of the precedence: the request's field, else the model's recommendation
    // (`--generation-config`), else the server's default below.
    let d = &loaded.sampling_defaults;
    let top_k = match f.top_k.or(d.top_k) {
        None | Some(-1) | Some(0) => 0,
        Some(k) if k > 0 => k as u32,
        Some(k) => {
            return Err(ValidationError::invalid_value(
                "top_k",
                "-1 (off) or a positive number",
                k,
            ));
        }
    };
    let mut logit_bias = Vec::new();
    for (key, &bias) in f.logit_bias.into_iter().flatten() {
        let id: u32 = key.parse().map_err(|_| {
            ValidationError::invalid_value("logit_bias", "keyed by token ids", format!("{key:?}"))
        })?;
        logit_bias.push((id, bias));
    }
    let stop = f.stop.map(Stop::to_vec).unwrap_or_default();
    if stop.iter().any(String::is_empty) {
        return Err(ValidationError::invalid(
            "stop",
            "a list of non-empty strings",
        ));
    }
    if let Some(p) = f.priority
        && p != 0
        && !loaded.priority_scheduling
    {
        return Err(ValidationError::Requires {
            field: "priority",
            needs: "the server to run with --scheduling-policy priority",
        });
    }
    let params = SamplingParams {
        temperature: f.temperature.or(d.temperature).unwrap_or(1.0),
        top_k,
        top_p: f.top_p.or(d.top_p).unwrap_or(1.0),
        min_p: f.min_p.or(d.min_p).unwrap_or(0.0),
        seed: f.seed,
        max_tokens: 1,
        stop_token_ids: f.stop_token_ids.cloned().unwrap_or_default(),
        ignore_eos: f.ignore_eos.unwrap_or(false),
        logprobs: f.logprobs,
        presence_penalty: f.presence_penalty.or(d.presence_penalty).unwrap_or(0.0),
        frequency_penalty: f.frequency_penalty.or(d.frequency_penalty).unwrap_or(0.0),
        repetition_penalty: f.repetition_penalty.or(d.repetition_penalty).unwrap_or(1.0),
        logit_bias,
        min_tokens: f.min_tokens.unwrap_or(0),
        n: f.n.unwrap_or(1),
        prompt_logprobs: f.prompt_logprobs,
        constraint: f.constraint.clone(),
        // Set with the prefix-cache key by `ValidRequest::with_lora` below.
        lora: None,
        kv_transfer: crate::prepare::kv_transfer::parse(
            f.kv_transfer_params,
            loaded.kv_role,
            &state.config().kv_transfer_peers,
        )?,
        num_speculative_tokens: crate::prepare::speculative::parse(
            f.speculative,
            loaded.speculative.as_ref(),
        )?,
    };
    // OpenAI's temperature range; the engine accepts more, clients expect this bound.
    if !(0.0..=2.0).contains(&params.temperature) {
        return Err(ValidationError::invalid_value(
            "temperature",
            "in [0, 2]",
            params.temperature,
        ));
    }
    let max_tokens = f.max_tokens.or(d.max_tokens);
    tracing::debug!(
        temperature = params.temperature,
        top_p = params.top_p,
        top_k = params.top_k,
        min_p = params.min_p,
        repetition_penalty = params.repetition_penalty,
        presence_penalty = params.presence_penalty,
        frequency_penalty = params.frequency_penalty,
        max_tokens = ?max_tokens,
        seed = ?params.seed,
        "sampling parameters"
    );
    // The tenant's own salt is put in front by `ValidRequest::for_tenant`.
    let cache_salt = f.cache_salt.cloned();
    let names = f.names;
    let unchecked = Unchecked {
        prompts,
        max_tokens,
        params,
        priority: f.priority.unwrap_or(0),
        cache_salt,
        text: TextOptions {
            stop,
            skip_special_tokens: f.skip_special_tokens.unwrap_or(true),
            include_stop_str_in_output: f.include_stop_str_in_output.unwrap_or(false),
        },
        stream,
        include_usage: f.include_usage.unwrap_or(false),
    };
    let mut request = ValidRequest::new(loaded.engine.limits(), unchecked, names)?;
    if let Some(lora) = &f.lora {
        request.with_lora(lora);
    }
    Ok(request)
}
