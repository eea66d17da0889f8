//! `/v1/embeddings` (OpenAI's shape): `input` in the four forms of a completions prompt,
//! `encoding_format` float or base64 (little-endian f32s), `dimensions` for models trained to
//! be truncated (Matryoshka), and vLLM's `truncate_prompt_tokens`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::common::Prompt;

/// Body of `POST /v1/embeddings`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EmbeddingRequest {
    /// Model id.
    #[serde(default)]
    pub model: String,
    /// A text, texts, token ids or token-id lists; one embedding each.
    pub input: Prompt,
    /// `"float"` (the default) or `"base64"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encoding_format: Option<String>,
    /// Keep the first `dimensions` values (then re-normalised), for Matryoshka models.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dimensions: Option<i64>,
    /// An end-user id (accepted, unused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// vLLM: keep only the last `k` tokens of an input longer than the model takes
    /// (`-1`: the model's maximum).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncate_prompt_tokens: Option<i64>,
    /// sentence-transformers: the model's prompt (`config_sentence_transformers.json`) put
    /// before each text, by name (`query`, `document`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_name: Option<String>,
    /// Ollama's: how long the model stays loaded after this request (seconds, or a duration
    /// such as `"5m"`; 0 unloads it after the request, negative keeps it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_alive: Option<Value>,
    /// Keys not listed above, kept so the server can name them in its 400.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl EmbeddingRequest {
    /// Every top-level key this type reads; any other lands in `extra` (the server's field
    /// policy suggests the nearest of these for a misspelt one).
    pub const FIELDS: &'static [&'static str] = &[
        "keep_alive",
        "model",
        "input",
        "encoding_format",
        "dimensions",
        "user",
        "truncate_prompt_tokens",
        "prompt_name",
    ];
}

/// One embedding: a list of floats, or base64 of their little-endian f32 bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum EmbeddingVector {
    /// `encoding_format: "float"`.
    Float(Vec<f32>),
    /// `encoding_format: "base64"`.
    Base64(String),
}

/// One entry of `data`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Embedding {
    /// Always `"embedding"`.
    pub object: String,
    /// Position of the input this embeds.
    pub index: u32,
    /// The vector.
    pub embedding: EmbeddingVector,
}

/// `usage` of an embeddings response.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EmbeddingUsage {
    /// Tokens over every input.
    pub prompt_tokens: u32,
    /// The same number (nothing is generated).
    pub total_tokens: u32,
}

/// Answer of `POST /v1/embeddings`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EmbeddingResponse {
    /// Always `"list"`.
    pub object: String,
    /// One embedding per input, in input order.
    pub data: Vec<Embedding>,
    /// The model id.
    pub model: String,
    /// Token counts.
    pub usage: EmbeddingUsage,
}
