//! Test-only views of the suffix tree (`check` of every invariant against brute force,
//! `dump` in canonical form) and the tree's unit and property tests.

#![allow(clippy::unwrap_used)]

use super::*;
use proptest::prelude::*;

impl SuffixTree {
    /// Every invariant of the module header, and every count against a brute-force count over
    /// the live texts.
    pub fn check(&self) -> Result<(), String> {
        let live = |id: u32| (id.wrapping_sub(self.first_id) as usize) < self.texts.len();
        let mut seen = 0usize;
        let mut stack = vec![(ROOT, 0usize)];
        while let Some((node, depth)) = stack.pop() {
            seen += 1;
            let n = &self.nodes[node as usize];
            if depth > self.max_depth {
                return Err(format!("node {node} at depth {depth}"));
            }
            if node != ROOT {
                if n.count == 0 || n.len == 0 || !live(n.text_id) {
                    return Err(format!("node {node}: {n:?}"));
                }
                let ending = n.count
                    - n.children
                        .iter()
                        .map(|&(_, c)| self.nodes[c as usize].count)
                        .sum::<u32>();
                if ending == 0 && n.children.len() < 2 {
                    return Err(format!("redundant node {node}"));
                }
                if !n.children.is_empty() {
                    let max = n
                        .children
                        .iter()
                        .map(|&(_, c)| self.nodes[c as usize].count)
                        .max();
                    if n.best == NONE || Some(self.nodes[n.best as usize].count) != max {
                        return Err(format!("node {node}: best {} is not a max child", n.best));
                    }
                }
            }
            let mut prev = None;
            for &(t, c) in &n.children {
                let cn = &self.nodes[c as usize];
                if prev.is_some_and(|p| p >= t) || cn.parent != node || self.label_token(c, 0) != t
                {
                    return Err(format!("child {c} of {node} misfiled"));
                }
                if cn.count > n.count {
                    return Err(format!("child {c} counts more than {node}"));
                }
                prev = Some(t);
                stack.push((c, depth + cn.len as usize));
            }
        }
        if seen != self.num_nodes() {
            return Err(format!(
                "{seen} reachable nodes, {} in use",
                self.num_nodes()
            ));
        }
        let total: usize = self.texts.iter().map(|t| t.tokens.len()).sum();
        if self.num_nodes() > 2 * total + 1 {
            return Err(format!("{} nodes for {total} tokens", self.num_nodes()));
        }
        if self.nodes[ROOT as usize].count as usize != total {
            return Err("root count".into());
        }
        for text in &self.texts {
            let t = &text.tokens;
            for s in 0..t.len() {
                for l in 1..=self.max_depth.min(t.len() - s) {
                    let w = &t[s..s + l];
                    let brute = self
                        .texts
                        .iter()
                        .map(|o| o.tokens.windows(l).filter(|x| *x == w).count())
                        .sum::<usize>();
                    let got = self
                        .match_context(w)
                        .map(|(n, _)| self.nodes[n as usize].count);
                    if got != Some(brute as u32) {
                        return Err(format!("count of {w:?}: tree {got:?}, brute {brute}"));
                    }
                }
            }
        }
        Ok(())
    }

    /// A canonical form: (root-to-node string, count) of every node, sorted.
    pub fn dump(&self) -> Vec<(Vec<u32>, u32)> {
        let mut out = Vec::new();
        let mut stack = vec![(ROOT, Vec::new())];
        while let Some((node, path)) = stack.pop() {
            out.push((path.clone(), self.nodes[node as usize].count));
            for &(_, c) in &self.nodes[node as usize].children {
                let mut p = path.clone();
                p.extend((0..self.nodes[c as usize].len).map(|i| self.label_token(c, i)));
                stack.push((c, p));
            }
        }
        out.sort();
        out
    }
}

const LIMITS: DraftLimits = DraftLimits {
    max_tokens: 16,
    spec_factor: 1.0,
    spec_offset: 0.0,
    min_token_prob: 0.1,
};

fn draft(tree: &SuffixTree, ctx: &[u32], limits: DraftLimits) -> (Vec<u32>, DraftScore) {
    let (mut cur, mut best) = (Vec::new(), Vec::new());
    let score = tree.best_draft(ctx, limits, &mut cur, &mut best);
    (best, score)
}

#[test]
fn counts_and_compression_on_a_repeat() {
    let mut t = SuffixTree::new(8);
    t.extend(&[1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2, 3]);
    t.check().unwrap();
    // "1 2 3" occurred twice before the end, always followed by "4 5".
    let (d, s) = draft(&t, &[9, 1, 2, 3], LIMITS);
    assert_eq!(d, [4, 5, 1]);
    assert_eq!(s.match_len, 3);
}

#[test]
fn most_frequent_continuation_wins_and_low_probability_stops() {
    let mut t = SuffixTree::new(8);
    for text in [&[1, 2, 7][..], &[1, 2, 7], &[1, 2, 8]] {
        t.start_text();
        t.extend(text);
    }
    t.check().unwrap();
    let (d, _) = draft(&t, &[0, 1, 2], LIMITS);
    assert_eq!(d, [7]);
    // P(7 | 1 2) = 2/3: below a threshold of 0.7 nothing is proposed.
    let strict = DraftLimits {
        min_token_prob: 0.7,
        ..LIMITS
    };
    assert!(draft(&t, &[0, 1, 2], strict).0.is_empty());
}

#[test]
fn draft_length_follows_match_length() {
    let mut t = SuffixTree::new(16);
    t.extend(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    t.start_text();
    // Only "3" matches: factor 1 allows one token, factor 2 two, offset adds.
    let (d, s) = draft(&t, &[0, 3], LIMITS);
    assert_eq!((d.as_slice(), s.match_len), (&[4][..], 1));
    let wide = DraftLimits {
        spec_factor: 2.0,
        ..LIMITS
    };
    assert_eq!(draft(&t, &[0, 3], wide).0, [4, 5]);
    let offset = DraftLimits {
        spec_offset: 2.0,
        ..LIMITS
    };
    assert_eq!(draft(&t, &[0, 3], offset).0, [4, 5, 6]);
    let capped = DraftLimits {
        max_tokens: 2,
        ..offset
    };
    assert_eq!(draft(&t, &[0, 3], capped).0, [4, 5]);
}

#[test]
fn removal_frees_everything() {
    let mut t = SuffixTree::new(6);
    t.start_text();
    t.extend(&[1, 2, 3, 1, 2, 3, 4]);
    t.start_text();
    t.extend(&[2, 3, 4, 2, 3]);
    t.check().unwrap();
    t.pop_oldest();
    t.check().unwrap();
    t.pop_oldest();
    t.check().unwrap();
    assert_eq!(t.num_nodes(), 1);
    assert_eq!(t.num_texts(), 0);
}

#[test]
fn removal_fuses_the_node_where_a_removed_string_ended() {
    // Found by proptest: removing [0, 0] left "0 0" with one child and no ending.
    let mut t = SuffixTree::new(3);
    t.start_text();
    t.extend(&[0, 0]);
    t.start_text();
    t.extend(&[0, 0, 1]);
    t.pop_oldest();
    t.check().unwrap();
}

#[test]
fn text_ids_wrap() {
    let mut t = SuffixTree::new(4);
    t.first_id = u32::MAX - 1;
    for i in 0..5 {
        t.start_text();
        t.extend(&[1, 2, 3, i]);
        if t.num_texts() > 2 {
            t.pop_oldest();
        }
        t.check().unwrap();
    }
    // The two live texts end "1 2 3 3" and "1 2 3 4": "3" is certain, then a tie.
    let (d, _) = draft(&t, &[0, 1, 2], LIMITS);
    assert_eq!((d.len(), d[0]), (2, 3));
}

#[test]
fn node_stays_small() {
    // Memory is counted per node (at most two per token): keep an eye on its size.
    assert_eq!(std::mem::size_of::<Node>(), 48);
}

fn texts() -> impl Strategy<Value = Vec<Vec<u32>>> {
    prop::collection::vec(prop::collection::vec(0u32..4, 0..30), 1..6)
}

proptest! {
    #[test]
    fn counts_match_brute_force_through_inserts_and_removals(
        texts in texts(),
        depth in 1usize..7,
        pops in 0usize..6,
    ) {
        let mut t = SuffixTree::new(depth);
        for text in &texts {
            t.start_text();
            t.extend(text);
            prop_assert_eq!(t.check(), Ok(()));
        }
        for _ in 0..pops.min(texts.len()) {
            t.pop_oldest();
            prop_assert_eq!(t.check(), Ok(()));
        }
    }

    #[test]
    fn chunked_growth_equals_one_shot(
        tokens in prop::collection::vec(0u32..3, 0..60),
        cuts in prop::collection::vec(0usize..60, 0..8),
    ) {
        let mut whole = SuffixTree::new(5);
        whole.extend(&tokens);
        let mut grown = SuffixTree::new(5);
        let mut cuts: Vec<usize> = cuts.into_iter().filter(|&c| c <= tokens.len()).collect();
        cuts.sort();
        let mut at = 0;
        for c in cuts.into_iter().chain([tokens.len()]) {
            grown.extend(&tokens[at..c]);
            at = c;
        }
        prop_assert_eq!(grown.check(), Ok(()));
        prop_assert_eq!(grown.dump(), whole.dump());
    }

    #[test]
    fn drafts_come_from_live_texts_only(
        texts in texts(),
        ctx in prop::collection::vec(0u32..4, 0..12),
    ) {
        // Tokens 100.. exist only in the first text; once it is removed none is proposed.
        let mut t = SuffixTree::new(6);
        t.start_text();
        let first: Vec<u32> = texts[0].iter().map(|x| x + 100).collect();
        t.extend(&first);
        for text in &texts[1..] {
            t.start_text();
            t.extend(text);
        }
        t.pop_oldest();
        let mixed: Vec<u32> = ctx.iter().map(|&x| if x == 3 { 103 } else { x }).collect();
        let (d, _) = draft(&t, &mixed, LIMITS);
        prop_assert!(d.iter().all(|&x| x < 100), "{:?}", d);
    }
}
