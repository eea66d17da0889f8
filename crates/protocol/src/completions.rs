//! `/v1/completions`: the request (OpenAI fields plus vLLM's extensions), the response, the
//! stream chunk and the legacy logprobs form `{tokens, token_logprobs, top_logprobs, text_offset}`.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::common::{FinishReason, Prompt, PromptLogprobs, Stop, StopReason, StreamOptions, Usage};

/// Body of `POST /v1/completions`.
///
/// Every optional field is `Option` so the server can tell "absent" from a default. Unknown keys
/// land in `extra` (the server rejects them naming the key).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CompletionRequest {
    /// Model id, as listed by `/v1/models`.
    pub model: String,
    /// The prompt(s).
    pub prompt: Prompt,
    /// Server-side best-of-n (generate `best_of`, return the best `n`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub best_of: Option<u32>,
    /// Prepend the prompt to the completion text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub echo: Option<bool>,
    /// Penalty on tokens by how often they already occur, in [-2, 2].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frequency_penalty: Option<f32>,
    /// Token id (as a string) -> bias added to its logit, in [-100, 100].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logit_bias: Option<BTreeMap<String, f32>>,
    /// Number of top log probabilities per token (0..=5 in OpenAI; vLLM allows more).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<u32>,
    /// Maximum tokens to generate per choice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Choices per prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<u32>,
    /// Penalty on tokens that already occur, in [-2, 2].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub presence_penalty: Option<f32>,
    /// Seed for reproducible sampling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Stop sequences (not included in the output unless `include_stop_str_in_output`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<Stop>,
    /// Stream the answer as SSE chunks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    /// Options for streaming (`include_usage`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<StreamOptions>,
    /// Text that comes after the completion (insertion).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suffix: Option<String>,
    /// Sampling temperature; 0 means greedy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// Nucleus sampling mass, in (0, 1].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f32>,
    /// End-user id (recorded, otherwise unused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,

    // ---- vLLM extensions ----
    /// vLLM: keep only the k most likely tokens (-1 or 0 disables).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<i32>,
    /// vLLM: drop tokens below `min_p` times the top probability.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_p: Option<f32>,
    /// vLLM: multiplicative repetition penalty (1 = off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repetition_penalty: Option<f32>,
    /// vLLM: keep generating past EOS (benchmarks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_eos: Option<bool>,
    /// vLLM: do not stop before this many tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_tokens: Option<u32>,
    /// vLLM: extra stop token ids.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_token_ids: Option<Vec<u32>>,
    /// vLLM: scheduling priority (lower runs first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// vLLM: salt mixed into prefix-cache hashes so tenants do not share cache entries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_salt: Option<String>,
    /// vLLM: prefill/decode disaggregation (its NixlConnector's shape): `{"do_remote_decode":
    /// true, "transfer_id", "remote_host", "remote_port"}` on a prefill replica,
    /// `{"do_remote_prefill": true, "transfer_id"}` on a decode replica (docs/scale-out.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_transfer_params: Option<serde_json::Value>,
    /// pagoda: this request's speculative decoding, within the server's: `false` turns it off,
    /// `{"method": "ngram"|"suffix"|"suffix+ngram"|"draft_model", "num_speculative_tokens": K}`
    /// caps K (the method must be the one the server runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speculative: Option<serde_json::Value>,
    /// vLLM: drop special tokens from the text (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_special_tokens: Option<bool>,
    /// vLLM: put spaces between special tokens when detokenizing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spaces_between_special_tokens: Option<bool>,
    /// vLLM: keep the matched stop string in the output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_stop_str_in_output: Option<bool>,
    /// vLLM: number of top log probabilities per prompt token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_logprobs: Option<u32>,
    /// vLLM: add BOS and other special tokens when tokenizing the prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub add_special_tokens: Option<bool>,
    /// vLLM: constrained decoding (`json`, `regex`, `choice`, `grammar`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured_outputs: Option<Value>,
    /// vLLM: `{"type": "json_object" | "json_schema" | "text", ...}` for completions too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_format: Option<Value>,

    /// Ollama's: how long the model stays loaded after this request (seconds, or a duration
    /// such as `"5m"`; 0 unloads it after the request, negative keeps it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_alive: Option<Value>,
    /// Keys not listed above, kept so the server can name them in its 400.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl CompletionRequest {
    /// Every top-level key this type reads; any other lands in `extra` (the server's field
    /// policy suggests the nearest of these for a misspelt one).
    pub const FIELDS: &'static [&'static str] = &[
        "keep_alive",
        "model",
        "prompt",
        "best_of",
        "echo",
        "frequency_penalty",
        "logit_bias",
        "logprobs",
        "max_tokens",
        "n",
        "presence_penalty",
        "seed",
        "stop",
        "stream",
        "stream_options",
        "suffix",
        "temperature",
        "top_p",
        "user",
        "top_k",
        "min_p",
        "repetition_penalty",
        "ignore_eos",
        "min_tokens",
        "stop_token_ids",
        "priority",
        "cache_salt",
        "kv_transfer_params",
        "speculative",
        "skip_special_tokens",
        "spaces_between_special_tokens",
        "include_stop_str_in_output",
        "prompt_logprobs",
        "add_special_tokens",
        "structured_outputs",
        "response_format",
    ];
}

/// Body of a non-streaming `/v1/completions` answer (`object: "text_completion"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompletionResponse {
    /// `cmpl-...`.
    pub id: String,
    /// Always `"text_completion"`.
    pub object: String,
    /// Unix seconds.
    pub created: u64,
    /// Model id.
    pub model: String,
    /// One per prompt and choice.
    pub choices: Vec<CompletionChoice>,
    /// Token counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// Backend configuration fingerprint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_fingerprint: Option<String>,
}

impl CompletionResponse {
    /// The `object` value of completion responses and chunks.
    pub const OBJECT: &'static str = "text_completion";
}

/// One choice of a completion (also used in stream chunks, with `text` the delta).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompletionChoice {
    /// Choice index.
    pub index: u32,
    /// Generated text (the new piece, in a stream chunk).
    pub text: String,
    /// Log probabilities when requested; OpenAI sends `null` otherwise.
    #[serde(default)]
    pub logprobs: Option<CompletionLogprobs>,
    /// Why generation stopped; `null` on stream chunks before the last.
    #[serde(default)]
    pub finish_reason: Option<FinishReason>,
    /// vLLM: the stop string or token that matched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<StopReason>,
    /// vLLM: per prompt token (the first is `null`), its logprob and the top alternatives; in a
    /// stream, on the choice's first chunk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_logprobs: Option<Vec<Option<PromptLogprobs>>>,
}

/// One SSE chunk of a streaming completion. Same shape as [`CompletionResponse`]; the final
/// usage chunk (with `stream_options.include_usage`) has empty `choices`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompletionStreamChunk {
    /// Same id on every chunk of a request.
    pub id: String,
    /// Always `"text_completion"`.
    pub object: String,
    /// Unix seconds.
    pub created: u64,
    /// Model id.
    pub model: String,
    /// Deltas; empty on the usage chunk.
    pub choices: Vec<CompletionChoice>,
    /// Present on the final usage chunk only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// Backend configuration fingerprint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_fingerprint: Option<String>,
}

/// Legacy completions logprobs: parallel arrays, one entry per generated token.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CompletionLogprobs {
    /// Token strings.
    pub tokens: Vec<String>,
    /// Log probability of each token (`null` for the first echoed prompt token).
    pub token_logprobs: Vec<Option<f32>>,
    /// The top alternatives of each position, most likely first.
    pub top_logprobs: Vec<Option<TopLogprobMap>>,
    /// Character offset of each token in the returned text.
    pub text_offset: Vec<u32>,
}

/// A JSON object `{token: logprob}` whose key order (most likely first) is kept.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TopLogprobMap(pub Vec<(String, f32)>);

impl Serialize for TopLogprobMap {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (token, logprob) in &self.0 {
            map.serialize_entry(token, logprob)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for TopLogprobMap {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct OrderedVisitor;
        impl<'de> Visitor<'de> for OrderedVisitor {
            type Value = TopLogprobMap;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object of token -> logprob")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Self::Value, A::Error> {
                let mut entries = Vec::with_capacity(access.size_hint().unwrap_or(0));
                while let Some((k, v)) = access.next_entry::<String, f32>()? {
                    entries.push((k, v));
                }
                Ok(TopLogprobMap(entries))
            }
        }
        deserializer.deserialize_map(OrderedVisitor)
    }
}
