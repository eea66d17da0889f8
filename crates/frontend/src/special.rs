//! Splits text around special tokens (control, unknown and user-defined) before the model's
//! own tokenizer runs, with llama.cpp's priority rules (llama-vocab.cpp tokenizer_st_partition).

/// A piece of the input: plain text for the tokenizer model, or a token matched whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fragment<'a> {
    Text(&'a str),
    Token(u32),
}

#[derive(Default)]
struct Node {
    /// Sorted by byte, for binary search.
    children: Vec<(u8, u32)>,
    /// The token whose text ends here, with its priority rank.
    token: Option<Terminal>,
}

#[derive(Clone, Copy)]
struct Terminal {
    id: u32,
    /// Position in llama.cpp's processing order: longer texts first.
    rank: u32,
    len: u32,
    /// Control/unknown: only matched with `parse_special`.
    special: bool,
}

/// A byte trie over the texts of all special tokens.
pub(crate) struct SpecialMatcher {
    nodes: Vec<Node>,
    /// Child of the root for each first byte (0 = none), so most positions cost one load.
    root: Box<[u32; 256]>,
}

struct Match {
    pos: usize,
    len: usize,
    rank: u32,
    id: u32,
}

impl SpecialMatcher {
    /// `tokens` are (id, text, is_control_or_unknown) of every token to match whole.
    pub(crate) fn new(mut tokens: Vec<(u32, &str, bool)>) -> Self {
        // llama.cpp sorts its special-token cache by text length, longest first; ties keep id order.
        tokens.retain(|(_, text, _)| !text.is_empty());
        tokens.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(&b.0)));
        let mut nodes = vec![Node::default()];
        let mut root = Box::new([0u32; 256]);
        for (rank, (id, text, special)) in tokens.into_iter().enumerate() {
            let bytes = text.as_bytes();
            let first = usize::from(bytes[0]);
            let mut node = if root[first] == 0 {
                nodes.push(Node::default());
                root[first] = (nodes.len() - 1) as u32;
                root[first]
            } else {
                root[first]
            };
            for &b in &bytes[1..] {
                let children = &nodes[node as usize].children;
                node = match children.binary_search_by_key(&b, |c| c.0) {
                    Ok(i) => children[i].1,
                    Err(i) => {
                        let new = nodes.len() as u32;
                        nodes.push(Node::default());
                        nodes[node as usize].children.insert(i, (b, new));
                        new
                    }
                };
            }
            let slot = &mut nodes[node as usize].token;
            if slot.is_none() {
                *slot = Some(Terminal {
                    id,
                    rank: rank as u32,
                    len: bytes.len() as u32,
                    special,
                });
            }
        }
        Self { nodes, root }
    }

    /// Splits `text` into plain-text fragments and whole special tokens. Control tokens count
    /// only when `parse_special`; user-defined ones always (as llama.cpp and HF tokenizers do).
    pub(crate) fn partition<'a>(&self, text: &'a str, parse_special: bool) -> Vec<Fragment<'a>> {
        let bytes = text.as_bytes();
        let mut matches = Vec::new();
        for pos in 0..bytes.len() {
            let mut node = self.root[usize::from(bytes[pos])];
            if node == 0 {
                continue;
            }
            let mut end = pos + 1;
            loop {
                let n = &self.nodes[node as usize];
                if let Some(t) = n.token
                    && (parse_special || !t.special)
                {
                    matches.push(Match {
                        pos,
                        len: t.len as usize,
                        rank: t.rank,
                        id: t.id,
                    });
                }
                let Some(&b) = bytes.get(end) else { break };
                match n.children.binary_search_by_key(&b, |c| c.0) {
                    Ok(i) => node = n.children[i].1,
                    Err(_) => break,
                }
                end += 1;
            }
        }
        if matches.is_empty() {
            return if text.is_empty() {
                Vec::new()
            } else {
                vec![Fragment::Text(text)]
            };
        }
        // llama.cpp takes each token in rank order and claims its occurrences left to right in
        // the text that no earlier token claimed; a match overlapping a claimed range is lost.
        matches.sort_by_key(|m| (m.rank, m.pos));
        let mut claimed = vec![false; bytes.len()];
        let mut accepted = Vec::new();
        for m in matches {
            let range = m.pos..m.pos + m.len;
            if claimed[range.clone()].iter().any(|&c| c) {
                continue;
            }
            claimed[range].iter_mut().for_each(|c| *c = true);
            accepted.push(m);
        }
        accepted.sort_by_key(|m| m.pos);
        let mut out = Vec::with_capacity(accepted.len() * 2 + 1);
        let mut at = 0;
        for m in accepted {
            // Matches of valid UTF-8 texts start and end on character boundaries.
            if m.pos > at
                && let Some(t) = text.get(at..m.pos)
            {
                out.push(Fragment::Text(t));
            }
            out.push(Fragment::Token(m.id));
            at = m.pos + m.len;
        }
        if at < text.len()
            && let Some(t) = text.get(at..)
        {
            out.push(Fragment::Text(t));
        }
        out
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn longer_tokens_win_even_when_they_start_later() {
        // llama.cpp order: "b c" (3 bytes) is claimed before "ab" (2 bytes).
        let m = SpecialMatcher::new(vec![(1, "ab", false), (2, "b c", false)]);
        assert_eq!(
            m.partition("ab c", true),
            vec![Fragment::Text("a"), Fragment::Token(2)]
        );
    }

    #[test]
    fn control_tokens_need_parse_special() {
        let m = SpecialMatcher::new(vec![(7, "<eos>", true), (8, "\n", false)]);
        assert_eq!(
            m.partition("x<eos>\n", true),
            vec![Fragment::Text("x"), Fragment::Token(7), Fragment::Token(8)]
        );
        assert_eq!(
            m.partition("x<eos>\n", false),
            vec![Fragment::Text("x<eos>"), Fragment::Token(8)]
        );
    }

    #[test]
    fn repeated_token_is_matched_left_to_right_without_overlap() {
        let m = SpecialMatcher::new(vec![(5, "\n\n", false)]);
        assert_eq!(
            m.partition("\n\n\n", true),
            vec![Fragment::Token(5), Fragment::Text("\n")]
        );
    }
}
