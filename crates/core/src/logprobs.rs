//! Log-probability records: what the sampler reports for one position and what the engine
//! streams back. Plain data, so the core can carry them without knowing about tensors.

/// A token and its natural-log probability.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TokenLogprob {
    pub token_id: u32,
    pub logprob: f32,
}

/// One position's log-probabilities: the token that was chosen (sampled, or the prompt's next
/// token for prompt logprobs), its log-probability and the most likely alternatives, best first.
#[derive(Clone, Debug, PartialEq)]
pub struct PositionLogprobs {
    pub token_id: u32,
    pub logprob: f32,
    /// 1-based rank of `token_id` among all tokens (1 = most likely).
    pub rank: u32,
    pub top: Vec<TokenLogprob>,
}
