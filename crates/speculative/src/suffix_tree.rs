//! A depth-bounded, path-compressed suffix tree over token texts with occurrence counts, the
//! index behind SuffixDecoding (same idea as Arctic Inference's `csrc/suffix_decoding/
//! suffix_tree.cc`, our own layout). Texts are appended token by token, the oldest text can be
//! removed, and `best_draft` walks the most frequent continuation of a context's suffix.
//!
//! What is indexed: for every text `t` and start `s`, the string `t[s .. min(len, s + D)]`
//! (`D` = `max_depth`). `count(node)` = how many of those strings pass through or end at the
//! node, so `count(child) / count(node)` is the empirical probability of that continuation.
//!
//! Invariants (checked by `check` in the tests):
//! - every indexed string ends exactly at a node end (never inside an edge), and every non-root
//!   node has a string ending at it or at least two children, so there are at most
//!   `2 * indexed tokens + 1` nodes: memory is O(tokens), not O(tokens * D);
//! - a node's edge label is `text(text_id)[end - len .. end]`, and that text holds an
//!   occurrence of the whole root-to-node string ending at `end`. `text_id` is the *newest*
//!   text through the node (set whenever a string of the text reaches the node's end). Texts
//!   are removed oldest first, so a node that survives a removal never points into it;
//! - `best` is a child of maximal count (ties go to the most recently incremented one, never
//!   to a newly created one, as Arctic's sibling order does). Not kept at the root: no draft starts there.
//!
//! Cost: appending a token touches the `D` active strings of the text, O(1) each (plus a
//! binary search among children); removing a text of `n` tokens walks its `n` strings, O(n * D);
//! `best_draft` matches each suffix length from the root, O(D^2) per call.

use std::collections::VecDeque;

/// Marks "no node".
const NONE: u32 = u32::MAX;
/// The root is node 0 and is never freed.
const ROOT: u32 = 0;

#[derive(Clone, Debug, Default)]
struct Node {
    /// Indexed strings that pass through or end at this node.
    count: u32,
    /// Parent node (`NONE` for the root).
    parent: u32,
    /// Child of maximal count, `NONE` for a leaf (and always at the root).
    best: u32,
    /// The newest text through this node; the label lies in it.
    text_id: u32,
    /// One past the label's last token in that text.
    end: u32,
    /// Label length (0 only for the root).
    len: u32,
    /// `(first label token, child)`, sorted by token.
    children: Vec<(u32, u32)>,
}

/// One text and, while it can still grow, the nodes where its last `< D` strings end.
#[derive(Debug, Default)]
struct Text {
    tokens: Vec<u32>,
    /// Where the strings starting at `len - active.len() ..= len - 1` end; oldest first.
    active: VecDeque<u32>,
}

/// The counted suffix index; see the module header.
#[derive(Debug)]
pub(crate) struct SuffixTree {
    max_depth: usize,
    nodes: Vec<Node>,
    /// Freed node slots, reused before growing `nodes`.
    free: Vec<u32>,
    texts: VecDeque<Text>,
    /// Id of `texts[0]`; ids grow by one per text (wrapping: only their distance from
    /// `first_id` is used, and far fewer than 2^32 texts are ever live).
    first_id: u32,
}

/// What `best_draft` found: the draft's score (sum of its token probabilities, Arctic's) and
/// the suffix length it matched.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct DraftScore {
    pub score: f32,
    pub match_len: usize,
}

/// How `best_draft` limits a draft (fields of `SuffixConfig`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct DraftLimits {
    pub max_tokens: usize,
    pub spec_factor: f32,
    pub spec_offset: f32,
    pub min_token_prob: f32,
}

impl SuffixTree {
    pub fn new(max_depth: usize) -> Self {
        let root = Node {
            parent: NONE,
            best: NONE,
            ..Node::default()
        };
        Self {
            max_depth: max_depth.max(1),
            nodes: vec![root],
            free: Vec::new(),
            texts: VecDeque::new(),
            first_id: 0,
        }
    }

    /// Texts held.
    pub fn num_texts(&self) -> usize {
        self.texts.len()
    }

    /// The newest text's tokens (empty when there is none).
    pub fn last_text(&self) -> &[u32] {
        self.texts.back().map_or(&[], |t| &t.tokens)
    }

    /// Nodes in use, root included.
    #[cfg(test)]
    pub fn num_nodes(&self) -> usize {
        self.nodes.len() - self.free.len()
    }

    /// Starts a new, empty text; the previous one can no longer grow.
    pub fn start_text(&mut self) {
        if let Some(prev) = self.texts.back_mut() {
            prev.active = VecDeque::new();
        }
        self.texts.push_back(Text::default());
    }

    /// Appends `tokens` to the newest text (starting one if there is none).
    pub fn extend(&mut self, tokens: &[u32]) {
        if self.texts.is_empty() {
            self.start_text();
        }
        let text_id = self.first_id.wrapping_add(self.texts.len() as u32 - 1);
        // The text stays in place (labels are read from it); only its active list moves out.
        let mut active = match self.texts.back_mut() {
            Some(text) => std::mem::take(&mut text.active),
            None => return,
        };
        for &token in tokens {
            let Some(text) = self.texts.back_mut() else {
                break;
            };
            // Positions are u32 in the nodes; a longer text stops being indexed.
            let Ok(end) = u32::try_from(text.tokens.len() + 1) else {
                break;
            };
            text.tokens.push(token);
            active.push_back(ROOT);
            self.nodes[ROOT as usize].count += 1;
            if active.len() > self.max_depth {
                // That string is `D` long: complete.
                active.pop_front();
            }
            for slot in active.iter_mut() {
                *slot = self.extend_string(*slot, token, text_id, end);
            }
        }
        if let Some(text) = self.texts.back_mut() {
            text.active = active;
        }
    }

    /// Removes the oldest text and every count it contributed.
    pub fn pop_oldest(&mut self) {
        // Walk with the text still in place: nodes it is the newest text of are read (and
        // freed, or re-pointed by a merge) during the walk. None survives pointing into it.
        let Some(text) = self.texts.front_mut() else {
            return;
        };
        text.active = VecDeque::new();
        let len = text.tokens.len();
        let mut dead = Vec::new();
        for s in 0..len {
            let want = self.max_depth.min(len - s);
            let root = &mut self.nodes[ROOT as usize];
            root.count = root.count.saturating_sub(1);
            let (mut node, mut depth) = (ROOT, 0);
            while depth < want {
                let key = self.texts[0].tokens[s + depth];
                let Some(child) = self.child(node, key) else {
                    debug_assert!(false, "removed string missing from the tree");
                    break;
                };
                depth += self.nodes[child as usize].len as usize;
                self.decrement(node, child, key, &mut dead);
                self.merge_if_redundant(node);
                node = child;
            }
            debug_assert_eq!(depth, want, "string ends inside an edge");
            // The string ended here: the node may be left with neither an ending nor a branch.
            self.merge_if_redundant(node);
            for n in dead.drain(..) {
                self.release(n);
            }
        }
        self.texts.pop_front();
        self.first_id = self.first_id.wrapping_add(1);
    }

    /// The best draft over all matched suffix lengths of `context`, as Arctic's
    /// `SuffixTree::speculate` (path mode): suffix lengths `1 .. min(len, D)` (exclusive, as
    /// Arctic), stop at the first length that does not match, allow `floor(factor * m +
    /// offset)` tokens for a match of `m`, keep the highest score (ties: the longer match).
    /// The draft goes to `best` (`cur` is scratch); both are cleared first.
    pub fn best_draft(
        &self,
        context: &[u32],
        limits: DraftLimits,
        cur: &mut Vec<u32>,
        best: &mut Vec<u32>,
    ) -> DraftScore {
        best.clear();
        let ctx = &context[context.len().saturating_sub(self.max_depth)..];
        let mut found = DraftScore::default();
        for match_len in 1..ctx.len() {
            let Some((node, idx)) = self.match_context(&ctx[ctx.len() - match_len..]) else {
                break;
            };
            let allowed = match_len as f32 * limits.spec_factor + limits.spec_offset + 1e-6;
            // `as` saturates: a negative or NaN allowance is 0 tokens.
            let allowed = (allowed.floor() as usize).min(limits.max_tokens);
            let score = self.follow_best(node, idx, allowed, limits.min_token_prob, cur);
            if score >= found.score {
                std::mem::swap(cur, best);
                found = DraftScore { score, match_len };
            }
        }
        found
    }

    /// Walks `pattern` from the root: the node and offset in its label where it ends.
    fn match_context(&self, pattern: &[u32]) -> Option<(u32, u32)> {
        let (mut node, mut idx) = (ROOT, 0u32);
        for &token in pattern {
            if idx == self.nodes[node as usize].len {
                node = self.child(node, token)?;
                idx = 0;
            }
            if self.label_token(node, idx) != token {
                return None;
            }
            idx += 1;
        }
        Some((node, idx))
    }

    /// Greedy continuation from (`node`, `idx`): follow each node's most frequent child while
    /// the running probability stays at or above `min_prob`. Returns the score.
    fn follow_best(
        &self,
        mut node: u32,
        mut idx: u32,
        max: usize,
        min_prob: f32,
        out: &mut Vec<u32>,
    ) -> f32 {
        out.clear();
        let (mut prob, mut score) = (1.0f32, 0.0f32);
        while out.len() < max && prob >= min_prob {
            let n = &self.nodes[node as usize];
            if idx < n.len {
                out.push(self.label_token(node, idx));
                score += prob;
                idx += 1;
            } else {
                if n.best == NONE || node == ROOT {
                    break;
                }
                prob *= self.nodes[n.best as usize].count as f32 / n.count as f32;
                node = n.best;
                idx = 0;
            }
        }
        score
    }

    /// Extends the string that ends at `node` by `token`, now ending at `end` in text
    /// `text_id`. Returns the node where it ends now.
    fn extend_string(&mut self, node: u32, token: u32, text_id: u32, end: u32) -> u32 {
        let Some(child) = self.child(node, token) else {
            let n = &mut self.nodes[node as usize];
            if node != ROOT && n.count == 1 {
                // Only this string reaches the node, so it is a leaf: lengthen its label.
                debug_assert!(n.children.is_empty());
                n.len += 1;
                n.end = end;
                n.text_id = text_id;
                return node;
            }
            let leaf = self.alloc(Node {
                count: 1,
                parent: node,
                best: NONE,
                text_id,
                end,
                len: 1,
                children: Vec::new(),
            });
            self.insert_child(node, token, leaf);
            // A new child joins the end of Arctic's sibling order: it wins no tie.
            if node != ROOT && self.nodes[node as usize].best == NONE {
                self.nodes[node as usize].best = leaf;
            }
            return leaf;
        };
        let (n_count, c_count, c_len) = {
            let (n, c) = (&self.nodes[node as usize], &self.nodes[child as usize]);
            (n.count, c.count, c.len)
        };
        if node != ROOT && n_count == c_count + 1 {
            // Only this string ends at `node` and every other one goes on into `child`:
            // slide the boundary one token down instead of splitting (keeps O(n) nodes).
            if c_len == 1 {
                // `child` takes `node`'s place, its label growing by `node`'s.
                let (parent, key, n_len) = {
                    let n = &self.nodes[node as usize];
                    (n.parent, self.label_token(node, 0), n.len)
                };
                let c = &mut self.nodes[child as usize];
                c.count += 1;
                c.len += n_len;
                c.end = end;
                c.text_id = text_id;
                c.parent = parent;
                self.replace_child(parent, key, node, child);
                self.nodes[node as usize].children.clear();
                self.release(node);
                return child;
            }
            let c = &mut self.nodes[child as usize];
            c.len -= 1;
            let next = self.label_token(child, 0);
            let n = &mut self.nodes[node as usize];
            n.len += 1;
            n.end = end;
            n.text_id = text_id;
            n.children[0] = (next, child);
            return node;
        }
        if c_len == 1 {
            let c = &mut self.nodes[child as usize];
            c.count += 1;
            c.end = end;
            c.text_id = text_id;
            self.bump_best(node, child);
            return child;
        }
        // Split `child` after its first token; the string ends at the new upper part.
        let rest_first = self.label_token(child, 1);
        let upper = self.alloc(Node {
            count: c_count + 1,
            parent: node,
            best: child,
            text_id,
            end,
            len: 1,
            children: vec![(rest_first, child)],
        });
        let c = &mut self.nodes[child as usize];
        c.len -= 1;
        c.parent = upper;
        self.replace_child(node, token, child, upper);
        self.bump_best(node, upper);
        upper
    }

    /// One string through `child` (a child of `node`) is gone. A child left with no string is
    /// detached now and freed (into `dead`) once the caller's walk has passed it.
    fn decrement(&mut self, node: u32, child: u32, key: u32, dead: &mut Vec<u32>) {
        let c = &mut self.nodes[child as usize];
        c.count = c.count.saturating_sub(1);
        if c.count == 0 {
            let n = &mut self.nodes[node as usize];
            if let Ok(i) = n.children.binary_search_by_key(&key, |&(t, _)| t) {
                n.children.remove(i);
            }
            dead.push(child);
        }
        if node != ROOT && self.nodes[node as usize].best == child {
            self.rescan_best(node);
        }
    }

    /// After a removal, a node left with one child and no string ending at it is fused into
    /// that child (the child keeps its id, children and text, which is the newest through both).
    fn merge_if_redundant(&mut self, node: u32) {
        let n = &self.nodes[node as usize];
        if node == ROOT || n.count == 0 || n.children.len() != 1 {
            return;
        }
        let only = n.children[0].1;
        if self.nodes[only as usize].count != n.count {
            return;
        }
        let (parent, key, n_len) = (n.parent, self.label_token(node, 0), n.len);
        let c = &mut self.nodes[only as usize];
        c.len += n_len;
        c.parent = parent;
        self.replace_child(parent, key, node, only);
        self.nodes[node as usize].children.clear();
        self.release(node);
    }

    fn child(&self, node: u32, token: u32) -> Option<u32> {
        let children = &self.nodes[node as usize].children;
        children
            .binary_search_by_key(&token, |&(t, _)| t)
            .ok()
            .map(|i| children[i].1)
    }

    fn insert_child(&mut self, node: u32, token: u32, child: u32) {
        let children = &mut self.nodes[node as usize].children;
        let i = children.partition_point(|&(t, _)| t < token);
        children.insert(i, (token, child));
    }

    /// Points `node`'s entry for `token` (now `old`) at `new`, and its `best` with it.
    fn replace_child(&mut self, node: u32, token: u32, old: u32, new: u32) {
        let n = &mut self.nodes[node as usize];
        if let Ok(i) = n.children.binary_search_by_key(&token, |&(t, _)| t) {
            debug_assert_eq!(n.children[i].1, old);
            n.children[i].1 = new;
        }
        if n.best == old && node != ROOT {
            n.best = new;
        }
    }

    /// `child`'s count just grew (or it is new): it becomes `best` on a tie or better.
    fn bump_best(&mut self, node: u32, child: u32) {
        if node == ROOT {
            return;
        }
        let best = self.nodes[node as usize].best;
        if best == NONE || self.nodes[child as usize].count >= self.nodes[best as usize].count {
            self.nodes[node as usize].best = child;
        }
    }

    fn rescan_best(&mut self, node: u32) {
        let mut best = (NONE, 0);
        for &(_, c) in &self.nodes[node as usize].children {
            let count = self.nodes[c as usize].count;
            if best.0 == NONE || count > best.1 {
                best = (c, count);
            }
        }
        self.nodes[node as usize].best = best.0;
    }

    fn label_token(&self, node: u32, idx: u32) -> u32 {
        let n = &self.nodes[node as usize];
        let text = &self.texts[n.text_id.wrapping_sub(self.first_id) as usize];
        text.tokens[(n.end - n.len + idx) as usize]
    }

    fn alloc(&mut self, node: Node) -> u32 {
        if let Some(i) = self.free.pop() {
            self.nodes[i as usize] = node;
            i
        } else {
            self.nodes.push(node);
            (self.nodes.len() - 1) as u32
        }
    }

    fn release(&mut self, node: u32) {
        debug_assert_ne!(node, ROOT);
        let n = &mut self.nodes[node as usize];
        n.children = Vec::new();
        n.count = 0;
        n.best = NONE;
        self.free.push(node);
    }
}

#[cfg(test)]
mod tests;
