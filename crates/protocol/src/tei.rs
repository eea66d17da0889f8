//! Hugging Face text-embeddings-inference's `POST /embed`: `inputs` (a text, texts, token ids
//! or token-id lists), `normalize` (default true), `truncate` and `truncation_direction`,
//! `prompt_name`, `dimensions`; answered with a JSON array of vectors, errors as
//! `{"error", "error_type"}`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::common::Prompt;

/// Body of TEI's `POST /embed`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TeiEmbedRequest {
    /// A text, texts, token ids or token-id lists; one vector each.
    pub inputs: Prompt,
    /// L2-normalise the vectors (TEI's default: true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub normalize: Option<bool>,
    /// Cut inputs longer than the model takes instead of refusing them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncate: Option<bool>,
    /// Which end `truncate` keeps: `Right` (the default) cuts the end, `Left` the start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncation_direction: Option<String>,
    /// sentence-transformers' prompt put before each text, by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_name: Option<String>,
    /// Keep the first `dimensions` values (Matryoshka models).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dimensions: Option<i64>,
    /// Keys not listed above, kept so the server can name them in its 400.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl TeiEmbedRequest {
    /// Every top-level key this type reads.
    pub const FIELDS: &'static [&'static str] = &[
        "inputs",
        "normalize",
        "truncate",
        "truncation_direction",
        "prompt_name",
        "dimensions",
    ];
}

/// TEI's error body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TeiError {
    /// What went wrong.
    pub error: String,
    /// `validation`, `empty`, `tokenizer`, `overloaded`, `unhealthy` or `backend`.
    pub error_type: String,
}
