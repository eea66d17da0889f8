//! One sequence's grammar state. Each step: `compute_mask` for the next position, the sampler
//! masks its logits with `apply_mask`, then `consume` advances the state with the chosen token.
//! When the grammar is finished (`is_finished`), only EOS may follow.

use llguidance::{Matcher, TokenParser};
use toktrie::SimpleVob;

use crate::StructuredError;

/// Allowed-token masks for one sequence.
pub struct ConstraintMatcher {
    matcher: Matcher,
    /// Bit i set = token i allowed; valid when `mask_ready`.
    mask: SimpleVob,
    mask_ready: bool,
    eos: u32,
    num_consumed: usize,
}

impl Clone for ConstraintMatcher {
    /// An independent copy of the grammar state (llguidance `Matcher::deep_clone`).
    fn clone(&self) -> Self {
        Self {
            matcher: self.matcher.deep_clone(),
            mask: self.mask.clone(),
            mask_ready: self.mask_ready,
            eos: self.eos,
            num_consumed: self.num_consumed,
        }
    }
}

impl std::fmt::Debug for ConstraintMatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConstraintMatcher")
            .field("num_consumed", &self.num_consumed)
            .field("finished", &self.is_finished())
            .finish()
    }
}

impl ConstraintMatcher {
    pub(crate) fn new(parser: TokenParser) -> Self {
        let eos = parser.token_env.tok_trie().eos_token();
        Self {
            matcher: Matcher::new(Ok(parser)),
            mask: SimpleVob::new(),
            mask_ready: false,
            eos,
            num_consumed: 0,
        }
    }

    /// The grammar is complete and admits nothing more: the sequence must end (with EOS).
    pub fn is_finished(&self) -> bool {
        self.matcher.is_stopped()
    }

    /// The end-of-generation id a finished grammar emits (the tokenizer's EOS, else its first
    /// end-of-generation id). Any end-of-generation id is allowed where the grammar accepts.
    pub fn eos_token(&self) -> u32 {
        self.eos
    }

    /// Tokens consumed so far.
    pub fn num_consumed(&self) -> usize {
        self.num_consumed
    }

    /// Computes the mask of the next position (no-op if already computed for it).
    pub fn compute_mask(&mut self) -> Result<(), StructuredError> {
        if self.mask_ready {
            return Ok(());
        }
        // A stopped matcher would fail compute_mask with NoExtension (NOTES.md gotcha 4).
        self.mask = self
            .matcher
            .compute_mask_or_eos()
            .map_err(|e| StructuredError::Matcher(e.to_string()))?;
        self.mask_ready = true;
        Ok(())
    }

    /// Whether `token` is allowed at the next position (computes the mask if needed).
    pub fn is_allowed(&mut self, token: u32) -> Result<bool, StructuredError> {
        self.compute_mask()?;
        Ok((token as usize) < self.mask.len() && self.mask.is_allowed(token))
    }

    /// Number of tokens the current mask allows (computes it if needed).
    pub fn num_allowed(&mut self) -> Result<usize, StructuredError> {
        self.compute_mask()?;
        Ok(self.mask.num_set())
    }

    /// Sets every disallowed logit (and any id beyond the tokenizer's vocabulary) to -inf.
    pub fn apply_mask(&mut self, logits: &mut [f32]) -> Result<(), StructuredError> {
        self.compute_mask()?;
        let words = self.mask.as_slice();
        for (w, chunk) in logits.chunks_mut(32).enumerate() {
            let bits = words.get(w).copied().unwrap_or(0);
            if bits == u32::MAX {
                continue;
            }
            if bits == 0 {
                chunk.fill(f32::NEG_INFINITY);
                continue;
            }
            for (b, l) in chunk.iter_mut().enumerate() {
                if bits & (1 << b) == 0 {
                    *l = f32::NEG_INFINITY;
                }
            }
        }
        Ok(())
    }

    /// Advances the grammar with the token chosen for the next position. Consuming EOS on a
    /// finished grammar is a no-op.
    pub fn consume(&mut self, token: u32) -> Result<(), StructuredError> {
        self.mask_ready = false;
        self.num_consumed += 1;
        if self.matcher.is_stopped() {
            return if self.matcher.is_error() {
                Err(StructuredError::Matcher(
                    self.matcher.get_error().unwrap_or_default(),
                ))
            } else {
                Ok(())
            };
        }
        self.matcher
            .consume_token(token)
            .map_err(|e| StructuredError::Matcher(e.to_string()))
    }

    /// Replays already generated tokens (a sequence whose state was rebuilt).
    pub fn replay(&mut self, tokens: &[u32]) -> Result<(), StructuredError> {
        for &t in tokens {
            self.consume(t)?;
        }
        Ok(())
    }
}
