//! The one check of a request against the engine it goes to: a prompt, token ids inside the
//! vocabulary, prompt + `max_tokens` inside the context, sampling parameters inside their bounds.
//! Passing it is the only way to get a `CheckedRequest`, which is what the engine accepts.

use thiserror::Error;

use crate::engine_request::EngineRequest;
use crate::sampling_params::SamplingParamsError;

/// What the engine can take: fixed when the engine is built, known to every front end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestLimits {
    pub vocab_size: usize,
    /// Longest prompt + generation.
    pub max_model_len: usize,
    /// Context shift is on: generation may run past `max_model_len` (only the prompt must fit).
    pub context_shift: bool,
}

/// A request that passed [`RequestLimits::check`]; the engine only debug-asserts it again.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckedRequest(EngineRequest);

impl CheckedRequest {
    pub fn get(&self) -> &EngineRequest {
        &self.0
    }

    pub fn into_inner(self) -> EngineRequest {
        self.0
    }

    /// Files the request under `tenant`: scheduled as its, and its prefix-cache salt prefixed
    /// by `salt` so no other tenant's request can share (or probe) its cached blocks. Neither
    /// touches what `check` checked.
    pub fn for_tenant(mut self, tenant: crate::tenant::Tenant, salt: &str) -> Self {
        self.0.tenant = tenant;
        self.0.extra_keys.for_tenant(salt);
        self
    }

    /// Runs the request with adapter `lora`: the executor gets it with the parameters and its
    /// digest enters the prefix-cache key (the one place both are set).
    pub fn with_lora(mut self, lora: crate::lora::LoraRef) -> Self {
        self.0.extra_keys.lora_id = Some(lora.digest());
        self.0.params.lora = Some(lora);
        self
    }

    /// The engine's id for it (assigned by whoever submits it).
    pub(crate) fn set_id(&mut self, id: crate::engine_request::RequestId) {
        self.0.id = id;
    }
}

/// A request the engine will never run as sent, naming the field, the bound and the value.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum LimitError {
    #[error("{}", self.describe(&|f| f))]
    EmptyPrompt,
    #[error("{}", self.describe(&|f| f))]
    BadToken {
        token: u32,
        position: usize,
        vocab_size: usize,
    },
    #[error("{}", self.describe(&|f| f))]
    TooLong {
        prompt: usize,
        max_tokens: usize,
        total: usize,
        max_model_len: usize,
    },
    #[error(transparent)]
    Params(#[from] SamplingParamsError),
}

impl LimitError {
    /// The request field at fault, in the engine's names (`prompt`, `max_tokens`, ...).
    pub fn field(&self) -> &'static str {
        match self {
            Self::EmptyPrompt | Self::BadToken { .. } => "prompt",
            Self::TooLong {
                prompt,
                max_model_len,
                ..
            } if prompt >= max_model_len => "prompt",
            Self::TooLong { .. } => "max_tokens",
            Self::Params(e) => e.field(),
        }
    }

    /// The message, with each engine field name passed through `name`, so an API whose field
    /// is called `max_completion_tokens` or `messages` says so.
    pub fn describe(&self, name: &dyn Fn(&'static str) -> &'static str) -> String {
        let prompt = name("prompt");
        match self {
            Self::EmptyPrompt => format!("`{prompt}` has no tokens"),
            Self::BadToken {
                token,
                position,
                vocab_size,
            } => format!(
                "`{prompt}` token id {token} at position {position} is outside the vocabulary of {vocab_size} tokens"
            ),
            Self::TooLong {
                prompt: len,
                max_model_len,
                ..
            } if len >= max_model_len => format!(
                "this model's maximum context length is {max_model_len} tokens, and the prompt has {len} tokens (at least one token must be left to generate)"
            ),
            Self::TooLong {
                prompt: len,
                max_tokens,
                total,
                max_model_len,
            } => format!(
                "this model's maximum context length is {max_model_len} tokens; the prompt has {len} tokens and `{}` is {max_tokens}: {total} exceeds it",
                name("max_tokens")
            ),
            Self::Params(e) => e.describe(name),
        }
    }
}

impl RequestLimits {
    /// Checks `req` against every bound; the first one broken is the error.
    pub fn check(&self, req: EngineRequest) -> Result<CheckedRequest, LimitError> {
        if req.prompt_token_ids.is_empty() {
            return Err(LimitError::EmptyPrompt);
        }
        req.params.validate()?;
        req.params.validate_against_vocab(self.vocab_size)?;
        if let Some((position, &token)) = req
            .prompt_token_ids
            .iter()
            .enumerate()
            .find(|(_, t)| **t as usize >= self.vocab_size)
        {
            return Err(LimitError::BadToken {
                token,
                position,
                vocab_size: self.vocab_size,
            });
        }
        let prompt = req.prompt_token_ids.len();
        let max_tokens = req.params.max_tokens as usize;
        let total = prompt + max_tokens;
        if prompt >= self.max_model_len || (total > self.max_model_len && !self.context_shift) {
            return Err(LimitError::TooLong {
                prompt,
                max_tokens,
                total,
                max_model_len: self.max_model_len,
            });
        }
        Ok(CheckedRequest(req))
    }

    /// `max_tokens` for a request that gave none: whatever room the context leaves (at least 1,
    /// so that a prompt that fills the context fails the check on the prompt, not here).
    pub fn room_after(&self, prompt_len: usize) -> u32 {
        let room = self.max_model_len.saturating_sub(prompt_len).max(1);
        u32::try_from(room).unwrap_or(u32::MAX)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::SamplingParams;

    fn req(prompt: Vec<u32>, max_tokens: u32) -> EngineRequest {
        EngineRequest {
            id: 0,
            prompt_token_ids: prompt,
            params: SamplingParams::greedy(max_tokens),
            priority: 0,
            tenant: Default::default(),
            extra_keys: Default::default(),
        }
    }

    #[test]
    fn an_adapter_keys_the_prefix_cache_by_its_digest() {
        let l = RequestLimits {
            vocab_size: 10,
            max_model_len: 8,
            context_shift: false,
        };
        let lora = |name: &str, digest| {
            let r = l.check(req(vec![1, 2], 2)).unwrap();
            r.with_lora(crate::LoraRef::new(name, digest, std::sync::Arc::new(())))
                .into_inner()
        };
        let base = l.check(req(vec![1, 2], 2)).unwrap().into_inner();
        let (a, a_again, a_changed) = (lora("a", 1), lora("b", 1), lora("a", 2));
        assert_eq!(a.params.lora.as_ref().map(|l| l.digest()), Some(1));
        // The first block's hash under the default seed: what the prefix cache keys on.
        let root = |r: &EngineRequest| {
            let mut hashes = Vec::new();
            let root = crate::kv::block_hash::root_hash("0");
            r.extra_keys
                .chain(root)
                .extend(&mut hashes, &[1, 2, 3, 4], 4);
            hashes[0]
        };
        assert_ne!(root(&a), root(&base));
        // The content decides, not the name.
        assert_eq!(root(&a), root(&a_again));
        assert_ne!(root(&a), root(&a_changed));
    }

    #[test]
    fn each_bound_names_its_field() {
        let l = RequestLimits {
            vocab_size: 10,
            max_model_len: 8,
            context_shift: false,
        };
        assert!(l.check(req(vec![1, 2], 6)).is_ok());
        let field = |r| l.check(r).unwrap_err().field();
        assert_eq!(field(req(vec![], 1)), "prompt");
        assert_eq!(field(req(vec![1, 10], 1)), "prompt");
        assert_eq!(field(req(vec![1; 8], 1)), "prompt");
        assert_eq!(field(req(vec![1; 2], 7)), "max_tokens");
        assert_eq!(field(req(vec![1; 2], 0)), "max_tokens");
        let e = l.check(req(vec![1; 2], 7)).unwrap_err();
        let renamed = e.describe(&|f| {
            if f == "max_tokens" {
                "max_completion_tokens"
            } else {
                f
            }
        });
        assert!(
            renamed.contains("`max_completion_tokens` is 7"),
            "{renamed}"
        );
        assert!(e.to_string().contains("`max_tokens` is 7"), "{e}");
        assert_eq!(l.room_after(3), 5);
        assert_eq!(l.room_after(9), 1);
    }
}
