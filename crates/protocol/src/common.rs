//! Types shared by the completions and chat endpoints: token usage, stream options, stop
//! sequences, the four shapes of `prompt`, and finish reasons.

use serde::{Deserialize, Serialize};

/// Token counts of one request, as in OpenAI's `usage` object.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Tokens in the prompt (after the chat template, for chat).
    pub prompt_tokens: u32,
    /// Tokens generated, over all choices.
    pub completion_tokens: u32,
    /// `prompt_tokens + completion_tokens`.
    pub total_tokens: u32,
    /// Breakdown of the prompt tokens; `cached_tokens` are prefix-cache hits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_details: Option<PromptTokensDetails>,
}

impl Usage {
    /// Usage with `total_tokens` filled in and no details.
    pub fn new(prompt_tokens: u32, completion_tokens: u32) -> Self {
        Self {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens + completion_tokens,
            prompt_tokens_details: None,
        }
    }
}

/// `usage.prompt_tokens_details`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromptTokensDetails {
    /// Prompt tokens whose KV came from the prefix cache.
    #[serde(default)]
    pub cached_tokens: u32,
}

/// One prompt position of vLLM's `prompt_logprobs`: token id (as a string key) -> its entry;
/// holds the prompt's own token and the most likely alternatives.
pub type PromptLogprobs = std::collections::BTreeMap<String, PromptLogprob>;

/// An entry of [`PromptLogprobs`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PromptLogprob {
    /// Natural log of its probability at that position.
    pub logprob: f32,
    /// 1-based rank among all tokens.
    pub rank: u32,
    /// The token's text.
    pub decoded_token: String,
}

/// `stream_options` of a streaming request.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StreamOptions {
    /// Send a final chunk with empty `choices` and the request's `usage`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_usage: Option<bool>,
    /// vLLM: put the running `usage` on every chunk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continuous_usage_stats: Option<bool>,
}

/// `stop`: one string or a list of strings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    /// `"stop": "\n"`.
    One(String),
    /// `"stop": ["\n", "END"]`.
    Many(Vec<String>),
}

impl Stop {
    /// The stop strings as a list, whichever form was sent.
    pub fn to_vec(&self) -> Vec<String> {
        match self {
            Stop::One(s) => vec![s.clone()],
            Stop::Many(v) => v.clone(),
        }
    }
}

/// `prompt` of `/v1/completions`: text, a batch of texts, token ids, or a batch of token-id lists.
///
/// Untagged: serde tries the variants in order, so `[]` parses as an empty `Texts`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Prompt {
    /// `"prompt": "Once upon a time"`.
    Text(String),
    /// `"prompt": ["a", "b"]`: one choice set per prompt.
    Texts(Vec<String>),
    /// `"prompt": [1, 2, 3]`: pre-tokenized.
    Tokens(Vec<u32>),
    /// `"prompt": [[1, 2], [3]]`: a batch of pre-tokenized prompts.
    TokenBatches(Vec<Vec<u32>>),
}

impl Default for Prompt {
    fn default() -> Self {
        Prompt::Text(String::new())
    }
}

impl From<&str> for Prompt {
    fn from(s: &str) -> Self {
        Prompt::Text(s.to_owned())
    }
}

impl From<String> for Prompt {
    fn from(s: String) -> Self {
        Prompt::Text(s)
    }
}

/// Why a choice stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// EOS, a stop token or a stop string.
    Stop,
    /// `max_tokens` or the context length.
    Length,
    /// The model called tools.
    ToolCalls,
    /// Content filter (never produced by pagoda; parsed for other servers).
    ContentFilter,
    /// Deprecated function calling.
    FunctionCall,
    /// vLLM: the request was aborted.
    Abort,
}

/// vLLM's `stop_reason`: the stop string or stop token id that ended the choice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum StopReason {
    /// A stop token id.
    Token(u32),
    /// A stop string.
    Text(String),
}
