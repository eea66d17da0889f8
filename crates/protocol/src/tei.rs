//! Hugging Face text-embeddings-inference's `POST /embed`: `inputs` (a text, texts, token ids
//! or token-id lists), `normalize` (default true), `truncate` and `truncation_direction`,
//! `prompt_name`, `dimensions`; answered with a JSON array of vectors, errors as
//! `{"error", "error_type"}`. And `POST /rerank`: `query` and `texts`, answered with
//! `[{"index", "score"}]`.

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

/// Body of TEI's `POST /rerank`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TeiRerankRequest {
    /// The text the `texts` are ranked against.
    pub query: String,
    /// The texts to rank.
    pub texts: Vec<String>,
    /// Cut inputs longer than the model takes instead of refusing them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncate: Option<bool>,
    /// A cross-encoder's logits instead of their sigmoid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_scores: Option<bool>,
    /// Echo each text in its result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub return_text: Option<bool>,
    /// Keys not listed above, kept so the server can name them in its 400.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl TeiRerankRequest {
    /// Every top-level key this type reads.
    pub const FIELDS: &'static [&'static str] =
        &["query", "texts", "truncate", "raw_scores", "return_text"];
}

/// A body of `POST /rerank`, which TEI (`texts`) and vLLM (Cohere's `documents`) both serve.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum AnyRerankRequest {
    /// TEI's, told by its `texts`.
    Tei(TeiRerankRequest),
    /// vLLM's (Cohere's shape).
    Cohere(crate::rerank::RerankRequest),
}

/// One entry of TEI's `/rerank` answer (a JSON array of them, most relevant first).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TeiRank {
    /// Position of the text in `texts`.
    pub index: u32,
    /// Its relevance to the query.
    pub score: f32,
    /// The text, when `return_text` asked for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

/// TEI's error body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TeiError {
    /// What went wrong.
    pub error: String,
    /// `validation`, `empty`, `tokenizer`, `overloaded`, `unhealthy` or `backend`.
    pub error_type: String,
}
