//! `ValidRequest`: what every API's wire request becomes before it reaches the engine: one
//! checked engine request per prompt (`n` choices each, fanned out by the engine core) and what
//! the text edge needs. `ValidRequest::new` is the one place a prompt meets the engine's limits.

use pagoda_core::kv::ExtraKeys;
use pagoda_core::{CheckedRequest, EngineRequest, RequestLimits, SamplingParams, Tenant};

use crate::prepare::validation_error::{FieldNames, ValidationError};

/// What the text edge does with the generated tokens.
#[derive(Clone, Debug, Default)]
pub struct TextOptions {
    pub stop: Vec<String>,
    pub skip_special_tokens: bool,
    pub include_stop_str_in_output: bool,
}

/// A request ready to submit.
#[derive(Clone, Debug)]
pub struct ValidRequest {
    /// One per prompt; choices are indexed prompt-major (`prompt * n + i`).
    pub requests: Vec<CheckedRequest>,
    /// Choices per prompt.
    pub n: u32,
    pub text: TextOptions,
    pub stream: bool,
    pub include_usage: bool,
    /// Unknown keys the field policy let through, reported once the request is admitted.
    pub ignored: crate::prepare::field_policy::Ignored,
}

/// A request's parts before the engine's limits are applied.
pub struct Unchecked {
    pub prompts: Vec<Vec<u32>>,
    /// `max_tokens` of `None` fills each prompt's context (the shortest room of all prompts).
    pub max_tokens: Option<u32>,
    pub params: SamplingParams,
    pub priority: i32,
    pub cache_salt: Option<String>,
    pub text: TextOptions,
    pub stream: bool,
    pub include_usage: bool,
}

impl ValidRequest {
    /// Checks every prompt against `limits` (with `names`, the API's spelling of the fields).
    pub fn new(
        limits: RequestLimits,
        u: Unchecked,
        names: FieldNames,
    ) -> Result<Self, ValidationError> {
        if u.prompts.is_empty() {
            return Err(ValidationError::Empty {
                field: names.rename("prompt"),
            });
        }
        let mut params = u.params;
        params.max_tokens = match u.max_tokens {
            Some(m) => m,
            None => u
                .prompts
                .iter()
                .map(|p| limits.room_after(p.len()))
                .min()
                .unwrap_or(1),
        };
        let extra_keys = ExtraKeys {
            lora_id: None,
            cache_salt: u.cache_salt,
        };
        let mut requests = Vec::with_capacity(u.prompts.len());
        for (index, prompt) in u.prompts.into_iter().enumerate() {
            let req = EngineRequest {
                id: 0,
                prompt_token_ids: prompt,
                params: params.clone(),
                priority: u.priority,
                tenant: Tenant::default(),
                extra_keys: extra_keys.clone(),
            };
            let checked = limits.check(req).map_err(|error| ValidationError::Engine {
                error,
                names,
                prompt: index,
            })?;
            requests.push(checked);
        }
        Ok(Self {
            requests,
            n: params.n.max(1),
            text: u.text,
            stream: u.stream,
            include_usage: u.include_usage,
            ignored: Default::default(),
        })
    }

    /// Runs every prompt with adapter `lora` (parameters and prefix-cache key).
    pub fn with_lora(&mut self, lora: &pagoda_core::LoraRef) {
        let requests = std::mem::take(&mut self.requests);
        self.requests = requests
            .into_iter()
            .map(|r| r.with_lora(lora.clone()))
            .collect();
    }

    /// Files every prompt under `tenant` (scheduling and prefix-cache salt).
    pub fn for_tenant(&mut self, tenant: Tenant, salt: &str) {
        let requests = std::mem::take(&mut self.requests);
        self.requests = requests
            .into_iter()
            .map(|r| r.for_tenant(tenant, salt))
            .collect();
    }

    /// Prompt tokens over every prompt.
    pub fn prompt_tokens(&self) -> u64 {
        self.requests
            .iter()
            .map(|r| r.get().prompt_token_ids.len() as u64)
            .sum()
    }

    /// The parameters every prompt shares.
    pub fn params(&self) -> &SamplingParams {
        // `new` refuses a request without prompts.
        &self.requests[0].get().params
    }

    pub fn prompt(&self, i: usize) -> &[u32] {
        &self.requests[i].get().prompt_token_ids
    }

    pub fn num_prompts(&self) -> usize {
        self.requests.len()
    }
}
