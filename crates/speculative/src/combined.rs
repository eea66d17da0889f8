//! `suffix+ngram`: both proposers asked for every sequence, and the draft behind the longer
//! matched context wins: the suffix indexes (recent outputs across requests, and the
//! sequence's own tokens) or n-gram prompt lookup (the earliest occurrence of the longest
//! matching suffix, a full K tokens after it). On equal match lengths the source with the better
//! recent acceptance for that sequence wins, then the longer draft, then the suffix index.
//!
//! Acceptance is learned without help from the engine: at the next call for a sequence, the
//! tokens that joined it since are compared with the draft it was given (the verified run is
//! the common prefix). It only breaks ties, so a wrong guess (a step that never ran) costs
//! nothing but a tie.

use std::collections::HashMap;

use crate::error::SpecConfigError;
use crate::ngram::NgramProposer;
use crate::proposer::{ProposeRequest, Proposer, each_request};
use crate::suffix::{SuffixConfig, SuffixProposer};

/// Each call keeps this share of a source's older evidence.
const DECAY: f32 = 0.8;

/// Which proposer a draft came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    Suffix = 0,
    Ngram = 1,
}

/// Decayed accepted tokens over attempts (accepted plus the rejection ending a short run).
#[derive(Clone, Copy, Debug, Default)]
struct Rate {
    accepted: f32,
    attempts: f32,
}

impl Rate {
    /// With one optimistic attempt of prior, so an untried source is not written off.
    fn value(self) -> f32 {
        (self.accepted + 0.5) / (self.attempts + 1.0)
    }
}

/// One running sequence's last draft and what each source earned.
#[derive(Clone, Debug, Default)]
struct Track {
    /// Tokens the sequence had when `draft` was proposed.
    len: usize,
    draft: Vec<u32>,
    source: Option<Source>,
    rates: [Rate; 2],
}

impl Track {
    /// Scores the last draft against the tokens that followed it, once they are there.
    fn learn(&mut self, tokens: &[u32]) {
        let Some(source) = self.source else {
            return;
        };
        let Some(new) = tokens.get(self.len..).filter(|t| !t.is_empty()) else {
            return; // the step has not run (preempted, or the same call again)
        };
        let accepted = self
            .draft
            .iter()
            .zip(new)
            .take_while(|(a, b)| a == b)
            .count();
        let r = &mut self.rates[source as usize];
        r.accepted = r.accepted * DECAY + accepted as f32;
        r.attempts =
            r.attempts * DECAY + (accepted + usize::from(accepted < self.draft.len())) as f32;
        self.source = None;
    }
}

/// The combined proposer; see the module header.
#[derive(Debug)]
pub struct SuffixNgramProposer {
    suffix: SuffixProposer,
    ngram: NgramProposer,
    seqs: HashMap<u64, Track>,
    /// Draft buffers reused across calls.
    suffix_draft: Vec<u32>,
    ngram_draft: Vec<u32>,
}

impl SuffixNgramProposer {
    /// The suffix index with `suffix`'s tunables, n-gram lookup of `min_n..=max_n` tokens.
    pub fn new(suffix: SuffixConfig, min_n: usize, max_n: usize) -> Result<Self, SpecConfigError> {
        Ok(Self {
            suffix: SuffixProposer::new(suffix)?,
            ngram: NgramProposer::new(min_n, max_n)?,
            seqs: HashMap::new(),
            suffix_draft: Vec::new(),
            ngram_draft: Vec::new(),
        })
    }

    fn propose_one(&mut self, req: &ProposeRequest<'_>, draft: &mut Vec<u32>) {
        let track = self.seqs.entry(req.seq_id).or_default();
        track.learn(req.tokens);
        self.suffix_draft.clear();
        self.ngram_draft.clear();
        let s_len = self.suffix.propose_one(req, &mut self.suffix_draft);
        let n_len = self
            .ngram
            .propose_matched(req.tokens, req.max_tokens, &mut self.ngram_draft);
        let (s_len, n_len) = (
            s_len * usize::from(!self.suffix_draft.is_empty()),
            n_len * usize::from(!self.ngram_draft.is_empty()),
        );
        let rate = |s: Source| track.rates[s as usize].value();
        let source = match s_len.cmp(&n_len) {
            _ if s_len == 0 && n_len == 0 => None,
            std::cmp::Ordering::Greater => Some(Source::Suffix),
            std::cmp::Ordering::Less => Some(Source::Ngram),
            std::cmp::Ordering::Equal => {
                let (rs, rn) = (rate(Source::Suffix), rate(Source::Ngram));
                let ngram_wins =
                    rn > rs || (rn == rs && self.ngram_draft.len() > self.suffix_draft.len());
                Some(if ngram_wins {
                    Source::Ngram
                } else {
                    Source::Suffix
                })
            }
        };
        let chosen = match source {
            Some(Source::Suffix) => &self.suffix_draft,
            Some(Source::Ngram) => &self.ngram_draft,
            None => &self.suffix_draft, // empty
        };
        draft.extend_from_slice(chosen);
        track.len = req.tokens.len();
        track.draft.clear();
        track.draft.extend_from_slice(chosen);
        track.source = source.filter(|_| !chosen.is_empty());
    }
}

impl Proposer for SuffixNgramProposer {
    fn propose(&mut self, reqs: &[ProposeRequest<'_>], out: &mut Vec<Vec<u32>>) {
        each_request(reqs, out, |req, draft| self.propose_one(req, draft));
    }

    fn finished(&mut self, seq_id: u64, tokens: &[u32], prompt_len: usize) {
        self.seqs.remove(&seq_id);
        self.suffix.finished(seq_id, tokens, prompt_len);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn req(seq_id: u64, tokens: &[u32], max_tokens: usize) -> ProposeRequest<'_> {
        ProposeRequest {
            seq_id,
            tokens,
            prompt_len: tokens.len(),
            max_tokens,
        }
    }

    fn one(p: &mut SuffixNgramProposer, r: ProposeRequest<'_>) -> Vec<u32> {
        let mut out = Vec::new();
        p.propose(&[r], &mut out);
        out.pop().unwrap()
    }

    fn proposer() -> SuffixNgramProposer {
        SuffixNgramProposer::new(SuffixConfig::default(), 2, 23).unwrap()
    }

    #[test]
    fn the_longer_match_wins_whichever_index_holds_it() {
        // Another request's output holds a long match; the sequence's own tokens a short one.
        let mut p = proposer();
        let earlier = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10];
        p.finished(7, &earlier, 0);
        let ctx = [20, 4, 5, 30, 3, 4, 5];
        // n-gram: "4 5" occurred at 1..3, followed by 30 (match 2); the shared index matches
        // "3 4 5" (match 3) and continues 6 7 8 (3 tokens for a 3-token match).
        assert_eq!(one(&mut p, req(1, &ctx, 8)), vec![6, 7, 8]);
        // Without the shared index it is the request's own prompt: n-gram's full K.
        let mut p = proposer();
        let ctx = [11, 12, 13, 14, 15, 16, 11, 12];
        assert_eq!(one(&mut p, req(1, &ctx, 4)), vec![13, 14, 15, 16]);
        // Nothing anywhere: nothing proposed.
        assert_eq!(one(&mut p, req(2, &[1, 2, 3], 4)), Vec::<u32>::new());
    }

    #[test]
    fn a_tie_goes_to_the_source_that_was_accepted() {
        // Own tokens only, each `a b` preceded by a different token, so both sources match
        // exactly `a b`: the suffix index follows its most frequent continuation (2, three
        // times), n-gram the earliest occurrence (1).
        let (a, b) = (50, 51);
        let mut toks = vec![a, b, 1, 60, a, b, 2, 61, a, b, 2, 62, a, b, 2, 63, a, b];
        let mut p = proposer();
        // A tie with no history and drafts of one length: the suffix index.
        assert_eq!(one(&mut p, req(1, &toks, 1)), vec![2]);
        // The target said 1: the suffix index lost a round, the n-gram's draft wins the tie.
        toks.extend([1, 64, a, b]);
        assert_eq!(one(&mut p, req(1, &toks, 1)), vec![1]);
        // A sequence of its own has no such history.
        assert_eq!(one(&mut p, req(2, &toks, 1)), vec![2]);
    }
}
