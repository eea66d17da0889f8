//! The tokenizer side of llguidance: a `TokTrie` over our GGUF tokenizer's token bytes and a
//! `TokenizerEnv` that tokenizes with the model's own tokenizer (canonical tokenization).

use std::sync::Arc;

use pagoda_frontend::{TokenType, Tokenizer};
use toktrie::{TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};

use crate::StructuredError;

/// Each token's bytes as the trie wants them. `Tokenizer::token_bytes` already undoes the
/// GPT-2 byte-to-unicode map and SPM's `▁` / `<0xXX>` forms. Control and unknown tokens get
/// llguidance's 0xFF marker in front, so grammar text can never spell them by accident
/// (llguidance docs/special_tokens.md); unused slots get no bytes, so no mask allows them.
/// User-defined tokens (Qwen's `<tool_call>`, Gemma's whitespace runs) are plain text, as in HF.
pub fn token_trie_words(tokenizer: &Tokenizer) -> Vec<Vec<u8>> {
    (0..tokenizer.vocab_size() as u32)
        .map(|id| {
            let bytes = tokenizer.token_bytes(id).unwrap_or_default();
            match tokenizer.token_type(id) {
                Some(TokenType::Control | TokenType::Unknown) => {
                    let mut w = Vec::with_capacity(bytes.len() + 1);
                    w.push(TokTrie::SPECIAL_TOKEN_MARKER);
                    w.extend_from_slice(bytes);
                    w
                }
                Some(TokenType::Unused) => Vec::new(),
                _ => bytes.to_vec(),
            }
        })
        .collect()
}

/// Our tokenizer as llguidance sees it.
pub(crate) struct PagodaTokEnv {
    tokenizer: Arc<Tokenizer>,
    trie: TokTrie,
}

impl PagodaTokEnv {
    /// Builds the trie; every end-of-generation id counts as EOS for the grammar.
    pub(crate) fn build(tokenizer: Arc<Tokenizer>) -> Result<TokEnv, StructuredError> {
        let vocab = tokenizer.vocab_size();
        let eog: Vec<u32> = tokenizer
            .eog_ids()
            .iter()
            .copied()
            .filter(|&id| (id as usize) < vocab)
            .collect();
        let Some(eos) = tokenizer
            .eos_id()
            .filter(|e| eog.contains(e))
            .or(eog.first().copied())
        else {
            return Err(StructuredError::Tokenizer(
                "the vocabulary has no end-of-generation token".into(),
            ));
        };
        let info = TokRxInfo {
            vocab_size: vocab as u32,
            tok_eos: eos,
            tok_bos: tokenizer.bos_id(),
            tok_pad: None,
            tok_unk: None,
            tok_end_of_turn: None,
        };
        let words = token_trie_words(&tokenizer);
        // Put the preferred EOS first: a finished grammar forces `eos_tokens()[0]`.
        let mut eos_list = vec![eos];
        eos_list.extend(eog.iter().copied().filter(|&t| t != eos));
        let trie = TokTrie::from(&info, &words).with_eos_tokens(&eos_list);
        Ok(Arc::new(Self { tokenizer, trie }))
    }
}

impl TokenizerEnv for PagodaTokEnv {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    /// The model's own tokenization when the text is UTF-8 and round-trips (SPM's space prefix
    /// would not); otherwise the trie's greedy tokenization.
    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        if let Ok(text) = std::str::from_utf8(s) {
            let ids = self.tokenizer.encode(text, false, false);
            let mut back = Vec::with_capacity(s.len());
            for &id in &ids {
                back.extend_from_slice(self.tokenizer.token_bytes(id).unwrap_or_default());
            }
            if back == s {
                return ids;
            }
        }
        self.trie.greedy_tokenize(s)
    }
}
