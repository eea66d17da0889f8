//! Log-probabilities under a plain softmax of the raw logits (vLLM's default `raw_logprobs`,
//! llama.cpp's `n_probs` without `post_sampling_probs`): the chosen token's, its rank and the
//! most likely alternatives. One routine serves sampled tokens and prompt tokens alike.

use pagoda_core::{PositionLogprobs, TokenLogprob};
use pagoda_kernels::ops::{count_equal, count_greater, exp_sum, max_ignoring_nan};

use super::select::{by_score_desc, top_k};

/// Log-probability and 1-based rank of `token_id` and the `k` most likely tokens (best first)
/// under a softmax over `logits`. Ties rank the lower id first, both in `top` and in `rank`
/// (so the greedy choice, also the lowest id on ties, has rank 1). An id outside `logits`
/// gets log-probability -inf.
pub fn position_logprobs(logits: &[f32], token_id: u32, k: usize) -> PositionLogprobs {
    let max = max_ignoring_nan(logits);
    let chosen = logits
        .get(token_id as usize)
        .copied()
        .unwrap_or(f32::NEG_INFINITY);
    // Vectorised passes instead of one scalar f64 exp per entry: the f32 exp is within ~2e-7
    // relative, and the f64 sum keeps a 262k-entry row from losing digits.
    let sum = exp_sum(logits, max, 1.0);
    let before = &logits[..(token_id as usize).min(logits.len())];
    let ranked_ahead = count_greater(logits, chosen) + count_equal(before, chosen);
    let mut top = Vec::with_capacity(k + 1);
    top_k(logits, k, &mut top);
    top.sort_unstable_by(by_score_desc);
    if top.len() < k {
        // Fewer than k entries above -inf: the -inf ones fill up the list, lowest id first.
        let fill = k - top.len();
        top.extend(
            logits
                .iter()
                .enumerate()
                .filter(|(_, l)| **l == f32::NEG_INFINITY)
                .take(fill)
                .map(|(i, &l)| (l, i as u32)),
        );
    }
    let log_z = max + sum.ln() as f32;
    PositionLogprobs {
        token_id,
        logprob: chosen - log_z,
        rank: ranked_ahead as u32 + 1,
        top: top
            .into_iter()
            .map(|(l, id)| TokenLogprob {
                token_id: id,
                logprob: l - log_z,
            })
            .collect(),
    }
}

/// Log-probabilities of a prompt's tokens: `logits` holds `next_tokens.len()` rows of
/// `vocab_size`, and row `i` scores `next_tokens[i]`, the prompt token after position `i`.
pub fn prompt_logprobs(
    logits: &[f32],
    vocab_size: usize,
    next_tokens: &[u32],
    k: usize,
) -> Vec<PositionLogprobs> {
    if vocab_size == 0 {
        return Vec::new();
    }
    debug_assert_eq!(logits.len(), next_tokens.len() * vocab_size);
    logits
        .chunks_exact(vocab_size)
        .zip(next_tokens)
        .map(|(row, &next)| position_logprobs(row, next, k))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// log softmax(row)[id], computed the long way.
    fn reference_logprob(row: &[f32], id: usize) -> f32 {
        let z: f64 = row.iter().map(|&l| f64::from(l).exp()).sum();
        (f64::from(row[id]).exp() / z).ln() as f32
    }

    #[test]
    fn rank_counts_better_tokens_and_breaks_ties_by_id() {
        let logits = [1.0f32, 3.0, 2.0, 3.0, -1.0];
        let rank = |id| position_logprobs(&logits, id, 0).rank;
        assert_eq!(rank(1), 1);
        assert_eq!(rank(3), 2);
        assert_eq!(rank(2), 3);
        assert_eq!(rank(0), 4);
        assert_eq!(rank(4), 5);
        // The rank matches the position in a full top list.
        let full = position_logprobs(&logits, 0, logits.len());
        for (pos, t) in full.top.iter().enumerate() {
            assert_eq!(rank(t.token_id) as usize, pos + 1);
        }
    }

    #[test]
    fn logprobs_match_the_softmax_and_top_is_sorted() {
        let logits = [0.5f32, -2.0, 4.0, 1.0, 3.5];
        let out = position_logprobs(&logits, 3, 3);
        assert_eq!(out.token_id, 3);
        assert!((out.logprob - reference_logprob(&logits, 3)).abs() < 1e-6);
        assert_eq!(
            out.top.iter().map(|t| t.token_id).collect::<Vec<_>>(),
            vec![2, 4, 3]
        );
        for t in &out.top {
            assert!((t.logprob - reference_logprob(&logits, t.token_id as usize)).abs() < 1e-6);
        }
        assert_eq!(out.rank, 3);
    }

    #[test]
    fn out_of_range_id_has_no_probability() {
        let out = position_logprobs(&[1.0, 2.0], 7, 1);
        assert_eq!(out.logprob, f32::NEG_INFINITY);
        assert_eq!(out.rank, 3);
        assert_eq!(out.top[0].token_id, 1);
    }

    #[test]
    fn prompt_logprobs_scores_each_row_against_its_next_token() {
        // Three positions over a vocabulary of four.
        let logits = [
            2.0f32, 0.0, 0.0, 0.0, // row 0: token 0 is the favourite
            0.0, 1.0, 3.0, 1.0, // row 1: token 2 is the favourite
            -1.0, -1.0, -1.0, -1.0, // row 2: uniform
        ];
        let next = [0u32, 1, 3];
        let out = prompt_logprobs(&logits, 4, &next, 2);
        assert_eq!(out.len(), 3);
        for (i, p) in out.iter().enumerate() {
            let row = &logits[i * 4..(i + 1) * 4];
            assert_eq!(p.token_id, next[i]);
            assert!((p.logprob - reference_logprob(row, next[i] as usize)).abs() < 1e-6);
            assert_eq!(p.top.len(), 2);
        }
        assert_eq!(out[0].rank, 1);
        assert_eq!(out[1].rank, 2);
        assert_eq!(out[1].top[0].token_id, 2);
        // Uniform row: log(1/4) everywhere, ties ranked by id.
        assert!((out[2].logprob - 0.25f32.ln()).abs() < 1e-6);
        assert_eq!(out[2].rank, 4);
        assert_eq!(
            out[2].top.iter().map(|t| t.token_id).collect::<Vec<_>>(),
            vec![0, 1]
        );
        assert!(prompt_logprobs(&[], 4, &[], 2).is_empty());
    }
}
