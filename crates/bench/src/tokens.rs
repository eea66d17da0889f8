//! Counting prompt tokens the way the target server does: its `/tokenize` endpoint (vLLM and
//! pagoda shape `{"prompt"}` -> `{"count", "tokens"}`, or llama.cpp's `{"content"}` ->
//! `{"tokens"}`), or, when neither answers, a stated approximation from word lengths.

use serde::{Deserialize, Serialize};

use crate::client::Target;

/// How prompt lengths were measured; recorded in the JSON output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CountMethod {
    /// `POST /tokenize {"prompt": ...}` (vLLM, pagoda).
    TokenizePrompt,
    /// `POST /tokenize {"content": ...}` (llama.cpp server).
    TokenizeContent,
    /// No tokenizer endpoint: each whitespace-separated word counts ceil(chars / 6) tokens,
    /// at least one ([`approximate_count`]); common English words are one token in 32k+
    /// vocabularies, longer words split.
    ApproxByWords,
}

/// Counts tokens of text for one target.
#[derive(Debug, Clone)]
pub struct TokenCounter {
    http: reqwest::Client,
    target: Target,
    /// The method found by [`TokenCounter::probe`].
    pub method: CountMethod,
}

#[derive(Deserialize)]
struct TokenizeAnswer {
    #[serde(default)]
    count: Option<u32>,
    #[serde(default)]
    tokens: Vec<serde_json::Value>,
}

impl TokenCounter {
    /// Find which `/tokenize` dialect the target speaks, if any.
    pub async fn probe(http: reqwest::Client, target: Target) -> Self {
        let mut counter = Self {
            http,
            target,
            method: CountMethod::TokenizePrompt,
        };
        for method in [CountMethod::TokenizePrompt, CountMethod::TokenizeContent] {
            counter.method = method;
            if matches!(counter.ask("hello world").await, Some(n) if n > 0) {
                return counter;
            }
        }
        counter.method = CountMethod::ApproxByWords;
        counter
    }

    /// An approximate counter that never calls the server (tests, `--no-tokenize`).
    pub fn approximate(http: reqwest::Client, target: Target) -> Self {
        Self {
            http,
            target,
            method: CountMethod::ApproxByWords,
        }
    }

    /// Token count of `text` by the target's method.
    pub async fn count(&self, text: &str) -> u32 {
        match self.method {
            CountMethod::ApproxByWords => approximate_count(text),
            _ => match self.ask(text).await {
                Some(n) => n,
                None => approximate_count(text),
            },
        }
    }

    async fn ask(&self, text: &str) -> Option<u32> {
        let body = match self.method {
            CountMethod::TokenizePrompt => serde_json::json!({ "prompt": text }),
            CountMethod::TokenizeContent => serde_json::json!({ "content": text }),
            CountMethod::ApproxByWords => return None,
        };
        let response = self
            .target
            .post(&self.http, "/tokenize")
            .json(&body)
            .send()
            .await
            .ok()?;
        if !response.status().is_success() {
            return None;
        }
        let answer: TokenizeAnswer = response.json().await.ok()?;
        Some(answer.count.unwrap_or(answer.tokens.len() as u32))
    }
}

/// The approximation: each whitespace-separated word is ceil(chars / 6) tokens, at least one.
pub fn approximate_count(text: &str) -> u32 {
    text.split_whitespace()
        .map(|w| (w.chars().count() as u32).div_ceil(6).max(1))
        .sum()
}
