//! A cost profile: what one machine measured about one model (forward-pass times on a small
//! grid of prefill chunks and decode batches, the per-row sampling cost, KV bytes per token and
//! the KV memory the server would take). `pagoda profile` writes it as JSON; `pagoda plan
//! --profile FILE` reads it, so a deployment can be sized on numbers from another machine.

use serde::{Deserialize, Serialize};

/// Version of the JSON layout; a file of another version is refused.
pub const PROFILE_VERSION: u32 = 1;

/// The machine a profile was measured on.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    /// CPU model name (from /proc/cpuinfo where there is one).
    pub cpu: String,
    /// Compute threads the kernels used.
    pub threads: usize,
    /// SIMD level the kernels chose.
    pub simd: String,
    /// Load average (1 minute) when the profile was taken: a busy machine measures slow.
    pub load_average: Option<f64>,
}

/// The model a profile belongs to.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelInfo {
    /// File or directory name.
    pub name: String,
    /// Bytes of the weights file (what a decode step streams from memory).
    pub file_bytes: u64,
    /// Transformer layers.
    pub n_layers: usize,
    /// Longest context the model was trained for.
    pub context_length: usize,
}

/// One prefill chunk: `tokens` new tokens of one sequence starting at position `context`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PrefillPoint {
    /// Tokens in the chunk.
    pub tokens: usize,
    /// Tokens already in the cache before the chunk.
    pub context: usize,
    /// Seconds of the forward pass.
    pub secs: f64,
}

/// One decode step: `seqs` sequences of one new token each, every one at `context` tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DecodePoint {
    /// Sequences in the step.
    pub seqs: usize,
    /// Tokens each sequence attends to.
    pub context: usize,
    /// Seconds of the forward pass.
    pub secs: f64,
}

/// Everything the planner knows about a machine and a model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CostProfile {
    /// [`PROFILE_VERSION`].
    pub version: u32,
    /// Where it was measured.
    pub machine: Machine,
    /// What was measured.
    pub model: ModelInfo,
    /// KV element type measured (`f16`, `int8`, `f32`).
    pub kv_cache_dtype: String,
    /// K and V of one token over all layers, bytes, for each KV dtype the server offers.
    pub kv_bytes_per_token: KvBytes,
    /// Bytes the server gives the KV cache by default on that machine (`--kv-cache-memory`).
    pub kv_budget_bytes: u64,
    /// Tokens per KV block.
    pub block_size: usize,
    /// Prefill chunks timed.
    pub prefill: Vec<PrefillPoint>,
    /// Decode steps timed.
    pub decode: Vec<DecodePoint>,
    /// Seconds to sample one row of logits (the server samples one row per sequence per step).
    pub sample_secs_per_seq: f64,
    /// Fixed cost of a step outside the forward pass (scheduling, bookkeeping), seconds.
    pub step_overhead_secs: f64,
    /// Decode steps timed through the real server (streamed requests, all sent at once:
    /// `secs` is a token gap's median): what the engine loop, scheduler, sampler and HTTP add
    /// around the forwards above. The fit scales every cost by their ratio to the forwards.
    /// Empty in profiles without them (`pagoda profile --no-served`, older files).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub served_decode: Vec<DecodePoint>,
}

/// KV bytes per token by element type.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct KvBytes {
    /// f32 elements.
    pub f32: u64,
    /// f16 elements (the server's default).
    pub f16: u64,
    /// int8 elements with one scale per token and KV head.
    pub int8: u64,
}

impl KvBytes {
    /// Bytes per token for `dtype` (`f32`, `f16`, `int8`).
    pub fn of(&self, dtype: &str) -> Option<u64> {
        match dtype {
            "f32" => Some(self.f32),
            "f16" => Some(self.f16),
            "int8" => Some(self.int8),
            _ => None,
        }
    }
}

/// Why a profile cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// Not JSON of the profile's shape.
    #[error("not a pagoda cost profile: {0}")]
    Parse(#[from] serde_json::Error),
    /// Another layout version.
    #[error(
        "cost profile version {found}, this pagoda reads version {PROFILE_VERSION}; measure again with `pagoda profile`"
    )]
    Version {
        /// The file's version.
        found: u32,
    },
    /// Too few points to fit the step-cost model.
    #[error("the cost profile is incomplete: {0}")]
    Incomplete(&'static str),
}

impl CostProfile {
    /// Parse and check a profile's JSON text.
    pub fn from_json(text: &str) -> Result<Self, ProfileError> {
        let p: CostProfile = serde_json::from_str(text)?;
        if p.version != PROFILE_VERSION {
            return Err(ProfileError::Version { found: p.version });
        }
        p.check()?;
        Ok(p)
    }

    /// The checks the planner relies on: some decode and prefill points, positive times.
    pub fn check(&self) -> Result<(), ProfileError> {
        if self.decode.is_empty() {
            return Err(ProfileError::Incomplete("no decode step was timed"));
        }
        if self.prefill.is_empty() {
            return Err(ProfileError::Incomplete("no prefill chunk was timed"));
        }
        let times = self.decode.iter().map(|d| d.secs);
        if times
            .chain(self.prefill.iter().map(|p| p.secs))
            .any(|s| !(s.is_finite() && s > 0.0))
        {
            return Err(ProfileError::Incomplete(
                "a timing is not a positive number",
            ));
        }
        if self.kv_bytes_per_token.f16 == 0 || self.block_size == 0 {
            return Err(ProfileError::Incomplete(
                "KV bytes per token or block size is zero",
            ));
        }
        Ok(())
    }

    /// Pretty JSON.
    pub fn to_json(&self) -> String {
        // A struct of numbers and strings always serializes.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }
}
