//! SuffixDecoding (Arctic Inference, arXiv 2411.04975): drafts from two suffix indexes, one
//! over the outputs of recently finished sequences (shared, FIFO-bounded) and one per running
//! sequence over its own prompt and output (grown incrementally, dropped when it finishes).
//!
//! Per request, each index yields its best draft (`SuffixTree::best_draft`: longest-to-
//! shortest matched suffix up to `max_tree_depth`, most frequent continuation, length
//! `max_spec_factor * match_len + max_spec_offset`, cut where the running probability falls
//! below `min_token_prob`); the per-sequence draft wins when its score (sum of token
//! probabilities) is at least the global one's, as in Arctic's `SuffixDecodingCache.speculate`.
//! Unlike Arctic, a running sequence's output enters the shared index only when it finishes.
//!
//! Memory: each index holds its tokens (4 bytes each) and at most `2 * tokens + 1` nodes of 48
//! bytes plus 8 per child edge, so under ~120 bytes per indexed token; the shared one holds the
//! outputs of at most `max_cached_requests` sequences (the oldest is removed with its counts first).

use std::collections::HashMap;

use crate::error::SpecConfigError;
use crate::proposer::{ProposeRequest, Proposer, each_request};
use crate::suffix_tree::{DraftLimits, SuffixTree};

/// SuffixDecoding's tunables, with vLLM's defaults for its `suffix` method.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SuffixConfig {
    /// Longest context suffix matched, and deepest an index goes (matched plus proposed
    /// tokens never exceed it). Default 24.
    pub max_tree_depth: usize,
    /// Finished outputs kept in the shared index; 0 turns the shared index off. Default 10000.
    pub max_cached_requests: usize,
    /// Draft length allowed per matched token. Default 1.0.
    pub max_spec_factor: f32,
    /// Draft length allowed on top of `max_spec_factor * match_len`. Default 0.0.
    pub max_spec_offset: f32,
    /// A draft stops before the first token whose estimated probability (the product of the
    /// continuation frequencies along the way) is below this. Default 0.1.
    pub min_token_prob: f32,
}

impl Default for SuffixConfig {
    fn default() -> Self {
        Self {
            max_tree_depth: 24,
            max_cached_requests: 10_000,
            max_spec_factor: 1.0,
            max_spec_offset: 0.0,
            min_token_prob: 0.1,
        }
    }
}

impl SuffixConfig {
    /// Refuses values no index can work with, naming the field.
    pub fn validate(&self) -> Result<(), SpecConfigError> {
        if self.max_tree_depth < 2 {
            return Err(SpecConfigError::TreeDepthTooSmall(self.max_tree_depth));
        }
        for (field, value) in [
            ("max_spec_factor", self.max_spec_factor),
            ("max_spec_offset", self.max_spec_offset),
        ] {
            if !value.is_finite() || value < 0.0 {
                return Err(SpecConfigError::NotNonNegative { field, value });
            }
        }
        if !(0.0..=1.0).contains(&self.min_token_prob) {
            return Err(SpecConfigError::MinTokenProb(self.min_token_prob));
        }
        Ok(())
    }
}

/// The SuffixDecoding proposer; see the module header.
#[derive(Debug)]
pub struct SuffixProposer {
    config: SuffixConfig,
    /// Outputs of finished sequences, one text each, oldest first.
    global: SuffixTree,
    /// Each running sequence's own tokens (prompt, then output), keyed by `seq_id`.
    seqs: HashMap<u64, SuffixTree>,
    /// Draft buffers reused across calls: (scratch, best) for each index.
    local_bufs: (Vec<u32>, Vec<u32>),
    global_bufs: (Vec<u32>, Vec<u32>),
}

impl SuffixProposer {
    /// A proposer with empty indexes.
    pub fn new(config: SuffixConfig) -> Result<Self, SpecConfigError> {
        config.validate()?;
        Ok(Self {
            config,
            global: SuffixTree::new(config.max_tree_depth),
            seqs: HashMap::new(),
            local_bufs: Default::default(),
            global_bufs: Default::default(),
        })
    }

    /// The configuration it runs with.
    pub fn config(&self) -> &SuffixConfig {
        &self.config
    }

    /// Finished outputs held in the shared index.
    pub fn num_cached_requests(&self) -> usize {
        self.global.num_texts()
    }

    /// Running sequences with a per-sequence index.
    pub fn num_active_requests(&self) -> usize {
        self.seqs.len()
    }

    /// Drops a sequence's own index without adding anything to the shared one (an abort whose
    /// output should not be learned from).
    pub fn forget(&mut self, seq_id: u64) {
        self.seqs.remove(&seq_id);
    }

    /// Appends the request's draft to `draft` and returns the suffix length it matched (0 when
    /// nothing was proposed).
    pub(crate) fn propose_one(&mut self, req: &ProposeRequest<'_>, draft: &mut Vec<u32>) -> usize {
        let limits = DraftLimits {
            max_tokens: req.max_tokens,
            spec_factor: self.config.max_spec_factor,
            spec_offset: self.config.max_spec_offset,
            min_token_prob: self.config.min_token_prob,
        };
        let depth = self.config.max_tree_depth;
        let local = self
            .seqs
            .entry(req.seq_id)
            .or_insert_with(|| SuffixTree::new(depth));
        sync(local, req.tokens, depth);
        let (cur, best) = &mut self.local_bufs;
        let local_score = local.best_draft(req.tokens, limits, cur, best);
        let global_score = if self.global.num_texts() > 0 {
            let (cur, best) = &mut self.global_bufs;
            self.global.best_draft(req.tokens, limits, cur, best)
        } else {
            self.global_bufs.1.clear();
            Default::default()
        };
        let (chosen, found) = if local_score.score >= global_score.score {
            (&self.local_bufs.1, local_score)
        } else {
            (&self.global_bufs.1, global_score)
        };
        draft.extend_from_slice(chosen);
        if chosen.is_empty() {
            0
        } else {
            found.match_len
        }
    }
}

/// Brings a sequence's index up to `tokens`: only the new tail is added. Tokens only ever grow
/// for a sequence; should they not match what was indexed (shorter, or a different last
/// indexed token), the index is rebuilt rather than left wrong.
fn sync(index: &mut SuffixTree, tokens: &[u32], depth: usize) {
    let have = index.last_text().len();
    let consistent =
        have <= tokens.len() && (have == 0 || index.last_text()[have - 1] == tokens[have - 1]);
    if !consistent {
        *index = SuffixTree::new(depth);
        index.extend(tokens);
    } else if have < tokens.len() {
        index.extend(&tokens[have..]);
    }
}

impl Proposer for SuffixProposer {
    fn propose(&mut self, reqs: &[ProposeRequest<'_>], out: &mut Vec<Vec<u32>>) {
        each_request(reqs, out, |req, draft| {
            self.propose_one(req, draft);
        });
    }

    fn finished(&mut self, seq_id: u64, tokens: &[u32], prompt_len: usize) {
        self.seqs.remove(&seq_id);
        let output = tokens.get(prompt_len..).unwrap_or_default();
        if self.config.max_cached_requests == 0 || output.is_empty() {
            return;
        }
        self.global.start_text();
        self.global.extend(output);
        while self.global.num_texts() > self.config.max_cached_requests {
            self.global.pop_oldest();
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn req(
        seq_id: u64,
        tokens: &[u32],
        prompt_len: usize,
        max_tokens: usize,
    ) -> ProposeRequest<'_> {
        ProposeRequest {
            seq_id,
            tokens,
            prompt_len,
            max_tokens,
        }
    }

    fn propose_one(p: &mut SuffixProposer, r: ProposeRequest<'_>) -> Vec<u32> {
        let mut out = Vec::new();
        p.propose(&[r], &mut out);
        out.pop().unwrap()
    }

    fn config(max_cached_requests: usize) -> SuffixConfig {
        SuffixConfig {
            max_cached_requests,
            ..SuffixConfig::default()
        }
    }

    #[test]
    fn repeated_output_of_a_finished_request_is_proposed() {
        let mut p = SuffixProposer::new(config(8)).unwrap();
        let answer: Vec<u32> = (100..140).collect();
        let mut first = vec![1, 2, 3];
        first.extend(&answer);
        p.finished(7, &first, 3);
        assert_eq!(p.num_cached_requests(), 1);
        // A new request with another prompt starts writing the same answer.
        let mut second = vec![9, 9, 8];
        second.extend(&answer[..10]);
        let draft = propose_one(&mut p, req(8, &second, 3, 16));
        // Matched 10 tokens (factor 1) so up to 10 proposed.
        assert_eq!(draft, answer[10..20]);
        let draft = propose_one(&mut p, req(8, &second, 3, 4));
        assert_eq!(draft, answer[10..14]);
    }

    #[test]
    fn own_prompt_is_proposed_from_the_per_sequence_index() {
        // Code editing: the output copies a block of the prompt.
        let mut p = SuffixProposer::new(config(0)).unwrap();
        let block: Vec<u32> = (50..80).collect();
        let mut tokens = vec![1, 2];
        tokens.extend(&block);
        tokens.extend([3, 4]);
        let prompt_len = tokens.len();
        tokens.extend(&block[..6]);
        let draft = propose_one(&mut p, req(1, &tokens, prompt_len, 8));
        assert_eq!(draft, block[6..12]);
        // Next step: the sequence accepted 3 tokens and got one more; the index only grows.
        tokens.extend(&block[6..10]);
        let draft = propose_one(&mut p, req(1, &tokens, prompt_len, 8));
        assert_eq!(draft, block[10..18]);
        assert_eq!(p.num_active_requests(), 1);
        p.finished(1, &tokens, prompt_len);
        assert_eq!(p.num_active_requests(), 0);
        assert_eq!(p.num_cached_requests(), 0);
    }

    #[test]
    fn the_more_confident_index_wins_and_a_tie_goes_to_the_sequence() {
        // The sequence's own history says "1 2" -> 3 once (P = 1/2: the current "1 2" counts
        // too); three finished outputs say "1 2" -> 4 4 (P = 1).
        let mut p = SuffixProposer::new(config(8)).unwrap();
        let own = [1, 2, 3, 9, 1, 2];
        for id in 0..3 {
            p.finished(id, &[1, 2, 4, 4], 0);
        }
        assert_eq!(propose_one(&mut p, req(10, &own, 6, 2)), [4, 4]);
        // Equal scores: the sequence's own draft. Own: "1 2" -> 3 9 at P = 1/2 each (score
        // 1); shared: only "2" matches, allowing one token, 6 at P = 1 (score 1).
        let mut p = SuffixProposer::new(config(8)).unwrap();
        p.finished(1, &[5, 2, 6], 0);
        assert_eq!(propose_one(&mut p, req(11, &own, 6, 2)), [3, 9]);
    }

    #[test]
    fn nothing_to_match_proposes_nothing_and_out_is_refilled() {
        let mut p = SuffixProposer::new(SuffixConfig::default()).unwrap();
        let a = [1, 2, 3, 4];
        let b = [5];
        let mut out = vec![vec![1, 2, 3]; 4];
        p.propose(&[req(1, &a, 4, 4), req(2, &b, 1, 4)], &mut out);
        assert_eq!(out, vec![Vec::<u32>::new(), Vec::new()]);
    }

    #[test]
    fn oldest_outputs_are_evicted_first() {
        let mut p = SuffixProposer::new(config(2)).unwrap();
        for (id, base) in [(1, 100u32), (2, 200), (3, 300)] {
            let tokens: Vec<u32> = (base..base + 20).collect();
            p.finished(id, &tokens, 0);
        }
        assert_eq!(p.num_cached_requests(), 2);
        let old: Vec<u32> = (100..105).collect();
        assert!(propose_one(&mut p, req(9, &old, 0, 8)).is_empty());
        let kept: Vec<u32> = (200..205).collect();
        assert_eq!(
            propose_one(&mut p, req(10, &kept, 0, 8)),
            (205..209).collect::<Vec<_>>()
        );
    }

    #[test]
    fn a_sequence_whose_tokens_change_is_reindexed() {
        let mut p = SuffixProposer::new(config(0)).unwrap();
        let a = [1, 2, 3, 1, 2];
        assert_eq!(propose_one(&mut p, req(1, &a, 5, 4)), [3, 1]);
        // Same id, different history (never happens in the engine; must not be wrong).
        let b = [7, 8, 9, 7, 8];
        assert_eq!(propose_one(&mut p, req(1, &b, 5, 4)), [9, 7]);
    }

    #[test]
    fn bad_config_is_refused() {
        let bad = |c: SuffixConfig| SuffixProposer::new(c).unwrap_err();
        let d = SuffixConfig::default();
        assert_eq!(
            bad(SuffixConfig {
                max_tree_depth: 1,
                ..d
            }),
            SpecConfigError::TreeDepthTooSmall(1)
        );
        assert!(matches!(
            bad(SuffixConfig {
                max_spec_factor: f32::NAN,
                ..d
            }),
            SpecConfigError::NotNonNegative {
                field: "max_spec_factor",
                ..
            }
        ));
        assert_eq!(
            bad(SuffixConfig {
                min_token_prob: 1.5,
                ..d
            }),
            SpecConfigError::MinTokenProb(1.5)
        );
    }

    /// Manual timing: `cargo test -p pagoda-speculative -- --ignored --nocapture suffix_timing`.
    #[test]
    #[ignore]
    fn suffix_timing() {
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 40) as u32 % 512
        };
        let mut p = SuffixProposer::new(SuffixConfig::default()).unwrap();
        for id in 0..200 {
            let out: Vec<u32> = (0..500).map(|_| next()).collect();
            p.finished(1000 + id, &out, 0);
        }
        let mut seqs: Vec<Vec<u32>> = (0..32)
            .map(|_| (0..8192).map(|_| next()).collect())
            .collect();
        let t0 = std::time::Instant::now();
        let mut out = Vec::new();
        let reqs: Vec<_> = seqs
            .iter()
            .enumerate()
            .map(|(i, t)| req(i as u64, t, t.len(), 8))
            .collect();
        p.propose(&reqs, &mut out);
        eprintln!(
            "suffix: first step (indexes 32 x 8192 prompts): {:?}",
            t0.elapsed()
        );
        let steps = 100;
        let t0 = std::time::Instant::now();
        for _ in 0..steps {
            for s in &mut seqs {
                s.push(next());
            }
            let reqs: Vec<_> = seqs
                .iter()
                .enumerate()
                .map(|(i, t)| req(i as u64, t, 8192, 8))
                .collect();
            p.propose(&reqs, &mut out);
        }
        eprintln!(
            "suffix: {:?} per decode step of 32 sequences",
            t0.elapsed() / steps
        );
    }

    proptest! {
        #[test]
        fn incremental_index_equals_a_fresh_build(
            tokens in prop::collection::vec(0u32..4, 1..80),
            steps in prop::collection::vec(1usize..6, 1..20),
        ) {
            let mut p = SuffixProposer::new(config(0)).unwrap();
            let mut len = 1;
            for step in steps {
                len = (len + step).min(tokens.len());
                let got = propose_one(&mut p, req(5, &tokens[..len], 1, 6));
                let mut fresh = SuffixProposer::new(config(0)).unwrap();
                let want = propose_one(&mut fresh, req(5, &tokens[..len], 1, 6));
                prop_assert_eq!(got, want);
                let grown = &p.seqs[&5];
                prop_assert_eq!(grown.check(), Ok(()));
                prop_assert_eq!(grown.dump(), fresh.seqs[&5].dump());
            }
        }

        #[test]
        fn eviction_bounds_the_index_and_forgets_evicted_tokens(
            outputs in prop::collection::vec(prop::collection::vec(0u32..6, 0..25), 1..12),
            keep in 1usize..4,
            ctx in prop::collection::vec(0u32..6, 1..10),
        ) {
            let mut p = SuffixProposer::new(config(keep)).unwrap();
            // Output i uses tokens 1000 * (i + 1) + x: each output's tokens are its own.
            for (i, o) in outputs.iter().enumerate() {
                let base = 1000 * (i as u32 + 1);
                let o: Vec<u32> = o.iter().map(|x| base + x).collect();
                p.finished(i as u64, &o, 0);
                prop_assert!(p.num_cached_requests() <= keep);
                prop_assert_eq!(p.global.check(), Ok(()));
            }
            let live_from = outputs.iter().filter(|o| !o.is_empty()).count().saturating_sub(keep);
            let nonempty: Vec<usize> = (0..outputs.len()).filter(|&i| !outputs[i].is_empty()).collect();
            let live: Vec<u32> = nonempty[live_from..].iter().map(|&i| 1000 * (i as u32 + 1)).collect();
            let total: usize = nonempty[live_from..].iter().map(|&i| outputs[i].len()).sum();
            prop_assert!(p.global.num_nodes() <= 2 * total + 1);
            // Ask with contexts drawn from every output, evicted ones included.
            for (i, _) in outputs.iter().enumerate() {
                let base = 1000 * (i as u32 + 1);
                let c: Vec<u32> = ctx.iter().map(|x| base + x).collect();
                let draft = propose_one(&mut p, req(100 + i as u64, &c, 0, 8));
                // Every proposed token is in a live output or the context itself.
                for t in draft {
                    prop_assert!(live.contains(&(t / 1000 * 1000)) || c.contains(&t), "{}", t);
                }
            }
        }

        #[test]
        fn never_panics(
            tokens in prop::collection::vec(any::<u32>(), 0..40),
            small in prop::collection::vec(0u32..3, 0..40),
            prompt_len in 0usize..50,
            max_tokens in 0usize..10,
            depth in 2usize..8,
        ) {
            let c = SuffixConfig { max_tree_depth: depth, max_cached_requests: 2, ..SuffixConfig::default() };
            let mut p = SuffixProposer::new(c).unwrap();
            let mut out = Vec::new();
            p.propose(&[req(1, &tokens, prompt_len, max_tokens), req(2, &small, prompt_len, max_tokens)], &mut out);
            prop_assert!(out.iter().all(|d| d.len() <= max_tokens));
            p.finished(1, &tokens, prompt_len);
            p.finished(2, &small, prompt_len);
            p.finished(3, &small, 0);
            p.propose(&[req(4, &small, 0, max_tokens)], &mut out);
            prop_assert!(out[0].len() <= max_tokens);
        }
    }
}
