//! A Hugging Face `tokenizer.json` run by the `tokenizers` crate itself, for the models whose
//! vocabulary has no GGUF form in pagoda (the WordPiece of BERT encoders). Its own truncation
//! and padding settings are turned off: the server decides what is too long.

use std::path::Path;

use crate::error::TokenizerError;

pub struct HfTokenizer {
    inner: tokenizers::Tokenizer,
}

impl HfTokenizer {
    /// Reads `path`, refusing a file over 256 MiB before reading it (the largest
    /// tokenizer.json files are about 30 MB; a model directory is untrusted input).
    pub fn from_file(path: &Path) -> Result<Self, TokenizerError> {
        const MAX_BYTES: u64 = 256 << 20;
        let bad = |e: String| TokenizerError::Json(format!("{}: {e}", path.display()));
        let len = std::fs::metadata(path)
            .map_err(|e| bad(e.to_string()))?
            .len();
        if len > MAX_BYTES {
            return Err(bad(format!("{len} bytes, over the {MAX_BYTES}-byte limit")));
        }
        let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
        Self::from_json(&text)
    }

    pub fn from_json(text: &str) -> Result<Self, TokenizerError> {
        // The tokenizers crate (0.21) panics instead of erring on some malformed parts (a
        // `decoder` that is not a JSON value: `expect("Helper")`, found by fuzzing): caught
        // here, so a bad tokenizer.json is an error naming the file, not a dead loader.
        let parsed =
            std::panic::catch_unwind(|| text.parse::<tokenizers::Tokenizer>()).map_err(|_| {
                TokenizerError::Json("tokenizer.json: malformed (the parser panicked)".into())
            })?;
        let mut inner = parsed.map_err(|e| TokenizerError::Json(format!("tokenizer.json: {e}")))?;
        inner
            .with_truncation(None)
            .map_err(|e| TokenizerError::Json(e.to_string()))?;
        inner.with_padding(None);
        Ok(Self { inner })
    }

    /// The ids of `text` with the tokenizer's special tokens around it ([CLS] ... [SEP]).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        self.inner
            .encode(text, true)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| TokenizerError::Json(e.to_string()))
    }

    /// The ids of the pair (`first`, `second`) as the tokenizer's post-processor joins them
    /// (BERT's `[CLS] first [SEP] second [SEP]`), and where the second segment starts: the
    /// first token of token type 1 (the length when the template gives none).
    pub fn encode_pair(
        &self,
        first: &str,
        second: &str,
    ) -> Result<(Vec<u32>, usize), TokenizerError> {
        let e = self
            .inner
            .encode((first, second), true)
            .map_err(|e| TokenizerError::Json(e.to_string()))?;
        let ids = e.get_ids().to_vec();
        let from = e
            .get_type_ids()
            .iter()
            .position(|&t| t != 0)
            .unwrap_or(ids.len());
        Ok((ids, from))
    }

    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        self.inner
            .decode(ids, true)
            .map_err(|e| TokenizerError::Json(e.to_string()))
    }
}
