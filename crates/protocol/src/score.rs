//! vLLM's `/v1/score`: `text_1` and `text_2`, each a string or a list, paired 1:1, 1:N (one
//! `text_1` against every `text_2`) or N:N (in order); answered with one score per pair.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::embeddings::EmbeddingUsage;

/// A text or texts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ScoreTexts {
    /// `"a text"`.
    One(String),
    /// `["a", "b"]`.
    Many(Vec<String>),
}

impl ScoreTexts {
    /// The texts, one or several.
    pub fn as_slice(&self) -> &[String] {
        match self {
            Self::One(t) => std::slice::from_ref(t),
            Self::Many(ts) => ts,
        }
    }
}

/// Body of `POST /v1/score`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScoreRequest {
    /// Model id.
    #[serde(default)]
    pub model: String,
    /// The first text of each pair (one: paired with every `text_2`).
    pub text_1: ScoreTexts,
    /// The second text of each pair.
    pub text_2: ScoreTexts,
    /// vLLM: cut each input to this many tokens (`-1`: the model's maximum) instead of
    /// refusing a longer one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncate_prompt_tokens: Option<i64>,
    /// Keys not listed above, kept so the server can name them in its 400.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ScoreRequest {
    /// Every top-level key this type reads.
    pub const FIELDS: &'static [&'static str] =
        &["model", "text_1", "text_2", "truncate_prompt_tokens"];
}

/// One pair's score.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScoreData {
    /// Position of the pair.
    pub index: u32,
    /// Always `"score"`.
    pub object: String,
    /// The pair's score.
    pub score: f32,
}

/// Answer of `POST /v1/score`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScoreResponse {
    /// `score-...`.
    pub id: String,
    /// Always `"list"`.
    pub object: String,
    /// Unix seconds.
    pub created: u64,
    /// The model id.
    pub model: String,
    /// One score per pair, in pair order.
    pub data: Vec<ScoreData>,
    /// Token counts.
    pub usage: EmbeddingUsage,
}
