//! N-gram prompt lookup: propose the tokens that followed an earlier occurrence of the
//! sequence's last n tokens. Same result as vLLM's `ngram_proposer.py`
//! (`_find_longest_matched_ngram_and_propose_tokens`), computed by a direct scan.
//!
//! Which occurrence wins, exactly as vLLM: the *longest* n in `[min_n, max_n]` whose last-n
//! tokens occur earlier, and among occurrences of that length the *earliest* one (smallest
//! start). vLLM runs KMP over the reversed context and updates on `>=`, which keeps the
//! earliest position; the earliest occurrence has the most tokens after it, so it can fill all
//! `k` draft slots where a late one would be cut short by the end of the context. An occurrence
//! may overlap the suffix itself, but it must end before the last token (so at least one token
//! follows it).
//!
//! Cost: one pass over the context comparing each token with the last one, plus a backward
//! extension (at most `max_n` compares) at each hit; the scan stops at the first hit of length
//! `max_n`. No allocation besides the caller's draft vector.

use crate::error::SpecConfigError;
use crate::proposer::{ProposeRequest, Proposer, each_request};

/// Prompt lookup decoding over the sequence's own tokens (prompt and output); stateless.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NgramProposer {
    /// Shortest suffix worth matching (`prompt_lookup_min`).
    min_n: usize,
    /// Longest suffix tried (`prompt_lookup_max`).
    max_n: usize,
}

impl NgramProposer {
    /// `min_n` and `max_n` are vLLM's `prompt_lookup_min` / `prompt_lookup_max`.
    pub fn new(min_n: usize, max_n: usize) -> Result<Self, SpecConfigError> {
        if min_n == 0 {
            return Err(SpecConfigError::NgramMinZero(min_n));
        }
        if max_n < min_n {
            return Err(SpecConfigError::NgramMaxBelowMin {
                min: min_n,
                max: max_n,
            });
        }
        Ok(Self { min_n, max_n })
    }

    /// The shortest n-gram matched.
    pub fn min_n(&self) -> usize {
        self.min_n
    }

    /// The longest n-gram matched.
    pub fn max_n(&self) -> usize {
        self.max_n
    }

    /// Appends to `out` up to `k` tokens that followed the chosen earlier occurrence of the
    /// longest matching suffix of `tokens`, or nothing when no suffix of at least `min_n`
    /// tokens occurred before.
    pub fn propose_one(&self, tokens: &[u32], k: usize, out: &mut Vec<u32>) {
        self.propose_matched(tokens, k, out);
    }

    /// As `propose_one`, and returns the length of the matched suffix (0: no match).
    pub(crate) fn propose_matched(&self, tokens: &[u32], k: usize, out: &mut Vec<u32>) -> usize {
        let Some((start, len)) = find_match(tokens, self.min_n, self.max_n) else {
            return 0;
        };
        let end = tokens.len().min(start.saturating_add(k));
        out.extend_from_slice(&tokens[start..end]);
        len
    }
}

impl Proposer for NgramProposer {
    fn propose(&mut self, reqs: &[ProposeRequest<'_>], out: &mut Vec<Vec<u32>>) {
        each_request(reqs, out, |req, draft| {
            self.propose_one(req.tokens, req.max_tokens, draft)
        });
    }

    fn finished(&mut self, _seq_id: u64, _tokens: &[u32], _prompt_len: usize) {}
}

/// Index of the first token after the chosen occurrence (see the module header) and the
/// length of the match, or `None`.
///
/// ```text
///   tokens:  a b c d a b c     last 3 = "a b c"
///            ^^^^^             occurrence ending at e = 2 (must be <= len - 2)
///                  ^ start = e + 1
/// ```
fn find_match(tokens: &[u32], min_n: usize, max_n: usize) -> Option<(usize, usize)> {
    let n = tokens.len();
    let (&last, _) = tokens.split_last()?;
    // An occurrence ends at index <= n - 2, so it is at most n - 1 long.
    let max_n = max_n.min(n - 1);
    if max_n < min_n {
        return None;
    }
    let mut best_len = 0;
    let mut best_end = 0;
    for (e, &t) in tokens[..n - 1].iter().enumerate() {
        if t != last {
            continue;
        }
        let mut len = 1;
        while len < max_n && len <= e && tokens[e - len] == tokens[n - 1 - len] {
            len += 1;
        }
        // Strictly longer only: for equal lengths the earliest occurrence stays.
        if len > best_len {
            best_len = len;
            best_end = e;
            if len == max_n {
                break;
            }
        }
    }
    (best_len >= min_n).then_some((best_end + 1, best_len))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn propose(tokens: &[u32], min_n: usize, max_n: usize, k: usize) -> Vec<u32> {
        let mut out = Vec::new();
        NgramProposer::new(min_n, max_n)
            .unwrap()
            .propose_one(tokens, k, &mut out);
        out
    }

    /// A line-by-line port of vLLM's KMP (`_find_longest_matched_ngram_and_propose_tokens`,
    /// with `max_model_len` out of the picture), the oracle for the direct scan.
    fn vllm_reference(origin: &[u32], min_ngram: usize, max_ngram: usize, k: usize) -> Vec<u32> {
        let total = origin.len();
        if total < min_ngram || k == 0 {
            return Vec::new();
        }
        let tokens: Vec<u32> = origin.iter().rev().copied().collect();
        let mut lps = vec![0usize; max_ngram];
        let (mut longest, mut position, mut prev_lps, mut i) = (0, 0, 0, 1);
        while i < total {
            if tokens[prev_lps] == tokens[i] {
                prev_lps += 1;
                if prev_lps >= longest {
                    longest = prev_lps;
                    position = i;
                }
                if i < max_ngram {
                    lps[i] = prev_lps;
                }
                if prev_lps == max_ngram {
                    prev_lps = lps[max_ngram - 1];
                }
                i += 1;
            } else if prev_lps != 0 {
                prev_lps = lps[prev_lps - 1];
            } else {
                i += 1;
            }
        }
        if longest < min_ngram {
            return Vec::new();
        }
        let start = total - 1 - position + longest;
        let k = k.min(total - start);
        origin[start..start + k].to_vec()
    }

    #[test]
    fn vllm_find_longest_matched_cases() {
        // tests/v1/spec_decode/test_ngram.py::test_find_longest_matched_ngram_and_propose_tokens
        assert!(propose(&[1, 2, 3, 4, 1, 2, 3, 5, 6], 2, 2, 2).is_empty());
        let t = [1, 2, 3, 4, 1, 2, 3];
        assert_eq!(propose(&t, 2, 2, 3), [4, 1, 2]);
        assert_eq!(propose(&t, 2, 2, 2), [4, 1]);
        assert_eq!(propose(&t, 1, 1, 3), [4, 1, 2]);
        assert_eq!(propose(&t, 1, 1, 2), [4, 1]);
        let t = [1, 3, 6, 2, 3, 4, 1, 2, 3];
        assert_eq!(propose(&t, 2, 2, 3), [4, 1, 2]);
        // The first (earliest) match wins.
        assert_eq!(propose(&t, 1, 1, 2), [6, 2]);
    }

    #[test]
    fn vllm_proposer_cases() {
        // tests/v1/spec_decode/test_ngram.py::test_ngram_proposer
        assert!(propose(&[1, 2, 3, 4, 5], 2, 2, 2).is_empty());
        assert!(propose(&[1, 2, 3, 4, 1, 2, 3], 4, 4, 2).is_empty());
        assert_eq!(propose(&[1, 2, 3, 4, 1, 2, 3], 3, 4, 2), [4, 1]);
        // Both a 4-gram and a 3-gram match: the 4-gram wins (not [5, 1]).
        let t = [2, 3, 4, 5, 1, 2, 3, 4, 1, 2, 3, 4];
        assert_eq!(propose(&t, 3, 4, 2), [1, 2]);
        // 2- and 3-gram match, not 4: the 3-gram wins (not [5, 2]).
        assert_eq!(propose(&[3, 4, 5, 2, 3, 4, 1, 2, 3, 4], 2, 4, 2), [1, 2]);
        // Several 3-gram matches: the first one.
        let t = [1, 2, 3, 100, 1, 2, 3, 200, 1, 2, 3, 300, 1, 2, 3];
        assert_eq!(propose(&t, 3, 3, 2), [100, 1]);
    }

    #[test]
    fn docstring_example_and_edges() {
        // ngram_proposer.py's docstring: [4,2,3] has no match, [2,3] does; only 3 tokens follow.
        assert_eq!(propose(&[1, 2, 3, 4, 2, 3], 2, 3, 4), [4, 2, 3]);
        assert!(propose(&[], 1, 3, 4).is_empty());
        assert!(propose(&[7], 1, 3, 4).is_empty());
        // A run of one token matches itself, overlapping the suffix.
        assert_eq!(propose(&[5, 5, 5, 5], 1, 3, 4), [5]);
        assert_eq!(propose(&[5, 5, 5, 5], 1, 2, 4), [5, 5]);
        // min_n longer than the context can hold.
        assert!(propose(&[1, 2, 1, 2], 4, 5, 4).is_empty());
    }

    #[test]
    fn batch_fills_one_draft_per_request_and_reuses_out() {
        let mut p = NgramProposer::new(1, 3).unwrap();
        let a = [1, 2, 3, 1, 2];
        let b = [9, 8, 7];
        let reqs = [
            ProposeRequest {
                seq_id: 1,
                tokens: &a,
                prompt_len: 3,
                max_tokens: 2,
            },
            ProposeRequest {
                seq_id: 2,
                tokens: &b,
                prompt_len: 3,
                max_tokens: 4,
            },
        ];
        let mut out = vec![vec![42; 8]; 5];
        p.propose(&reqs, &mut out);
        assert_eq!(out, vec![vec![3, 1], vec![]]);
        p.propose(&reqs[1..], &mut out);
        assert_eq!(out, vec![Vec::<u32>::new()]);
    }

    #[test]
    fn bad_config_is_refused() {
        assert_eq!(
            NgramProposer::new(0, 3),
            Err(SpecConfigError::NgramMinZero(0))
        );
        assert_eq!(
            NgramProposer::new(3, 2),
            Err(SpecConfigError::NgramMaxBelowMin { min: 3, max: 2 })
        );
    }

    /// Manual timing: `cargo test -p pagoda-speculative --release -- --ignored --nocapture ngram_timing`.
    /// 32 sequences of 8k tokens with a small alphabet (many hits) and no long match.
    #[test]
    #[ignore]
    fn ngram_timing() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let seqs: Vec<Vec<u32>> = (0..32)
            .map(|_| {
                (0..8192)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        (x >> 40) as u32 % 64
                    })
                    .collect()
            })
            .collect();
        let reqs: Vec<ProposeRequest<'_>> = seqs
            .iter()
            .enumerate()
            .map(|(i, t)| ProposeRequest {
                seq_id: i as u64,
                tokens: t,
                prompt_len: t.len(),
                max_tokens: 8,
            })
            .collect();
        let mut p = NgramProposer::new(2, 5).unwrap();
        let mut out = Vec::new();
        let runs = 200;
        let t0 = std::time::Instant::now();
        for _ in 0..runs {
            p.propose(std::hint::black_box(&reqs), &mut out);
        }
        let per_step = t0.elapsed() / runs;
        eprintln!("ngram: {per_step:?} per step of 32 x 8192 tokens");
    }

    proptest! {
        #[test]
        fn equals_vllm_kmp(
            tokens in prop::collection::vec(0u32..4, 0..60),
            min_n in 1usize..5,
            extra in 0usize..4,
            k in 0usize..8,
        ) {
            let max_n = min_n + extra;
            prop_assert_eq!(
                propose(&tokens, min_n, max_n, k),
                vllm_reference(&tokens, min_n, max_n, k)
            );
        }

        #[test]
        fn draft_really_followed_a_matching_ngram(
            tokens in prop::collection::vec(0u32..3, 0..40),
            k in 1usize..6,
        ) {
            let n = tokens.len();
            if let Some((start, _)) = find_match(&tokens, 1, 4) {
                let draft = propose(&tokens, 1, 4, k);
                prop_assert!(!draft.is_empty() && draft.len() <= k);
                prop_assert_eq!(&draft[..], &tokens[start..(start + k).min(n)]);
                // The token before the draft equals the last token: the match is real.
                prop_assert_eq!(tokens[start - 1], tokens[n - 1]);
            }
        }
    }
}
