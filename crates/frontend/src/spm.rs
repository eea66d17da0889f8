//! SentencePiece-style tokenizer for `tokenizer.ggml.model = llama` vocabularies without merges
//! (Gemma 3): greedy merging of adjacent pieces by the score of the merged piece, with byte
//! fallback (llama-vocab.cpp llm_tokenizer_spm_session).

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

/// The score-driven merge tokenizer. Vocabulary lookups go through the shared piece -> id map.
pub(crate) struct Spm {
    scores: Vec<f32>,
    /// `<0xXX>` token for each byte, or the token whose text is that single byte.
    byte_tokens: [Option<u32>; 256],
}

#[derive(Clone, Copy)]
struct Symbol {
    start: u32,
    len: u32,
    prev: i32,
    next: i32,
}

struct Bigram {
    score: f32,
    left: i32,
    right: i32,
    size: u32,
}

// The highest score pops first; among equal scores the leftmost pair (llm_bigram_spm::comparator).
impl Ord for Bigram {
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .total_cmp(&other.score)
            .then(other.left.cmp(&self.left))
    }
}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Bigram {}

impl Spm {
    pub(crate) fn new(scores: Vec<f32>, token_to_id: &HashMap<String, u32>) -> Self {
        let mut byte_tokens = [None; 256];
        for (b, slot) in byte_tokens.iter_mut().enumerate() {
            // llama_vocab::impl::byte_to_token: "<0xXX>" with upper-case hex, else the raw byte.
            let hex = format!("<0x{b:02X}>");
            *slot = token_to_id.get(&hex).copied().or_else(|| {
                let raw = [b as u8];
                std::str::from_utf8(&raw)
                    .ok()
                    .and_then(|s| token_to_id.get(s).copied())
            });
        }
        Self {
            scores,
            byte_tokens,
        }
    }

    /// Tokenizes one plain-text fragment (already free of special tokens) into `out`.
    /// `unk` stands in for a byte with no token, which a well-formed vocabulary never lacks.
    pub(crate) fn encode(
        &self,
        fragment: &str,
        add_space_prefix: bool,
        token_to_id: &HashMap<String, u32>,
        unk: Option<u32>,
        out: &mut Vec<u32>,
    ) {
        // llama_escape_whitespace: every ' ' becomes U+2581 before merging.
        let mut text = String::with_capacity(fragment.len() + 8);
        if add_space_prefix {
            text.push('\u{2581}');
        }
        for c in fragment.chars() {
            text.push(if c == ' ' { '\u{2581}' } else { c });
        }
        if text.is_empty() {
            return;
        }

        let mut symbols: Vec<Symbol> = Vec::with_capacity(text.len());
        for (i, (start, c)) in text.char_indices().enumerate() {
            let len = c.len_utf8() as u32;
            let next = if start + c.len_utf8() == text.len() {
                -1
            } else {
                i as i32 + 1
            };
            symbols.push(Symbol {
                start: start as u32,
                len,
                prev: i as i32 - 1,
                next,
            });
        }

        let mut queue = BinaryHeap::with_capacity(symbols.len());
        let try_add =
            |queue: &mut BinaryHeap<Bigram>, symbols: &[Symbol], left: i32, right: i32| {
                if left < 0 || right < 0 {
                    return;
                }
                let (l, r) = (symbols[left as usize], symbols[right as usize]);
                let (a, b) = (l.start as usize, (r.start + r.len) as usize);
                let Some(piece) = text.get(a..b) else { return };
                if let Some(&id) = token_to_id.get(piece) {
                    let score = self.scores.get(id as usize).copied().unwrap_or(0.0);
                    queue.push(Bigram {
                        score,
                        left,
                        right,
                        size: l.len + r.len,
                    });
                }
            };
        for i in 1..symbols.len() {
            try_add(&mut queue, &symbols, i as i32 - 1, i as i32);
        }

        while let Some(bigram) = queue.pop() {
            let (li, ri) = (bigram.left as usize, bigram.right as usize);
            let (l, r) = (symbols[li], symbols[ri]);
            // Stale entry: one side was merged away or grew since this pair was queued.
            if l.len == 0 || r.len == 0 || l.len + r.len != bigram.size {
                continue;
            }
            symbols[li].len += r.len;
            symbols[ri].len = 0;
            symbols[li].next = r.next;
            if r.next >= 0 {
                symbols[r.next as usize].prev = bigram.left;
            }
            let prev = symbols[li].prev;
            let next = symbols[li].next;
            try_add(&mut queue, &symbols, prev, bigram.left);
            try_add(&mut queue, &symbols, bigram.left, next);
        }

        let mut i = 0i32;
        while i >= 0 {
            let s = symbols[i as usize];
            let piece = &text[s.start as usize..(s.start + s.len) as usize];
            match token_to_id.get(piece) {
                Some(&id) => out.push(id),
                // Only unmerged single characters can be missing: every merge made a known piece.
                None => {
                    for &b in piece.as_bytes() {
                        if let Some(id) = self.byte_tokens[usize::from(b)].or(unk) {
                            out.push(id);
                        }
                    }
                }
            }
            i = s.next;
        }
    }
}
