//! `/v1/rerank` (Cohere's and Jina's shape, as vLLM serves it): a `query`, `documents` (strings
//! or Cohere's `{"text": ...}` objects), `top_n`, `return_documents`; answered with the
//! documents' indices and relevance scores, most relevant first.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Body of `POST /v1/rerank`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RerankRequest {
    /// Model id.
    #[serde(default)]
    pub model: String,
    /// The text the documents are ranked against.
    pub query: String,
    /// The texts to rank.
    pub documents: Vec<RerankDocument>,
    /// Answer only the `top_n` most relevant (default: all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_n: Option<i64>,
    /// Echo each document's text in its result (default: true, as vLLM does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub return_documents: Option<bool>,
    /// vLLM: cut each input to this many tokens (`-1`: the model's maximum) instead of
    /// refusing a longer one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncate_prompt_tokens: Option<i64>,
    /// Keys not listed above, kept so the server can name them in its 400.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl RerankRequest {
    /// Every top-level key this type reads.
    pub const FIELDS: &'static [&'static str] = &[
        "model",
        "query",
        "documents",
        "top_n",
        "return_documents",
        "truncate_prompt_tokens",
    ];
}

/// A document to rank: a string, or an object with its `text`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RerankDocument {
    /// `"a document"`.
    Text(String),
    /// `{"text": "a document"}` (Cohere's form; other keys are ignored).
    Object {
        /// The document's text.
        text: String,
    },
}

impl RerankDocument {
    /// The document's text, whichever form it came in.
    pub fn text(&self) -> &str {
        match self {
            Self::Text(t) | Self::Object { text: t } => t,
        }
    }
}

/// `document` of a result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RerankResultDocument {
    /// The document's text as sent.
    pub text: String,
}

/// One ranked document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RerankResult {
    /// Position of the document in the request's `documents`.
    pub index: u32,
    /// How relevant it is to the query (higher: more).
    pub relevance_score: f32,
    /// The document, unless `return_documents` was false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub document: Option<RerankResultDocument>,
}

/// `usage` of a rerank response.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RerankUsage {
    /// Tokens the model ran over.
    pub total_tokens: u32,
}

/// Answer of `POST /v1/rerank`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RerankResponse {
    /// `rerank-...`.
    pub id: String,
    /// The model id.
    pub model: String,
    /// The documents, most relevant first.
    pub results: Vec<RerankResult>,
    /// Token counts.
    pub usage: RerankUsage,
}
