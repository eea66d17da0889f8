//! A draft model's output head cut to the first rows of the vocabulary. A BPE vocabulary is
//! numbered in merge order, so its low ids are its frequent tokens, and the head's rows are
//! the largest read of a small draft's step (Qwen2.5-0.5B: 145 of 392 MB a token). A draft
//! only guesses; the target verifies every proposal, so a token past the cut is simply never
//! proposed (FR-Spec, Zhao et al. 2025, cuts a draft's head to its frequent tokens the same way).

use super::Model;
use crate::ModelError;
use crate::weights::Linear;

impl Model {
    /// Keeps the output head's first `rows` rows (all of them when `rows` is at least the
    /// vocabulary); the logits of a step are then `rows` wide ([`Model::logits_width`]), while
    /// any id of the vocabulary may still be fed. Only for a whole model on one rank.
    pub fn keep_head_rows(&mut self, rows: usize) -> Result<(), ModelError> {
        let c = &self.full_config;
        if rows >= c.vocab_size || rows == 0 {
            return Ok(());
        }
        if self.tp.is_some() || self.stage.is_some() {
            return Err(ModelError::InvalidRequest(
                "a narrowed output head is only for a model on one rank".into(),
            ));
        }
        // The head as loaded, before packing: the file's `output.weight`, or the tied
        // embedding (see `load_with`).
        let whole = if self.weights.has("output.weight") {
            self.weights
                .linear("output", c.vocab_size, c.d_model, false)?
        } else {
            Linear {
                weight: self.token_embd.clone(),
                bias: None,
            }
        };
        let part = self.weights.slice(whole, 0..rows, 0..c.d_model)?;
        // Packed here, after the load's pack session closed: the cache keeps the whole head.
        self.lm_head = Some(self.weights.packed(part));
        Ok(())
    }

    /// Width of a logits row of this model's steps: its vocabulary, or the rows a narrowed
    /// head kept.
    pub fn logits_width(&self) -> usize {
        match (&self.lm_head, &self.tp) {
            (Some(l), None) => l.weight.rows,
            _ => self.config.vocab_size,
        }
    }
}
