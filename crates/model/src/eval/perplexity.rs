//! Perplexity in llama-perplexity's windows: the text's tokens cut into chunks of `ctx`, each
//! run from position 0 with its first token replaced by BOS (when the model has one), and only
//! the second half of each chunk scored, so every scored token sees at least `ctx / 2` tokens
//! of context.

use crate::eval::EvalError;
use crate::runner::batch::{ForwardBatch, Logits, SeqChunk};
use crate::{CpuExecutor, Model};

const BLOCK_SIZE: usize = 16;

/// How a text of `num_tokens` tokens is cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkPlan {
    pub ctx: usize,
    pub num_chunks: usize,
    /// The first scored position of a chunk: `ctx / 2`. Positions `first..ctx - 1` are scored
    /// (each predicts the token after it).
    pub first: usize,
}

impl ChunkPlan {
    /// Whole chunks only, at most `max_chunks` of them (`None`: all that fit).
    pub fn new(
        num_tokens: usize,
        ctx: usize,
        max_chunks: Option<usize>,
    ) -> Result<Self, EvalError> {
        let fit = num_tokens / ctx;
        if fit == 0 {
            return Err(EvalError::TextTooShort {
                tokens: num_tokens,
                ctx,
            });
        }
        Ok(Self {
            ctx,
            num_chunks: max_chunks.map_or(fit, |m| m.clamp(1, fit)),
            first: ctx / 2,
        })
    }

    pub fn scored_per_chunk(&self) -> usize {
        self.ctx - 1 - self.first
    }
}

/// Runs one chunk at a time through a model with a private KV arena of one window.
pub struct Evaluator {
    exec: CpuExecutor,
    /// One table: the executor's single KV group.
    block_tables: Vec<Vec<u32>>,
    ctx: usize,
    logprobs: Vec<f32>,
}

impl Evaluator {
    pub fn new(model: Model, ctx: usize) -> Result<Self, EvalError> {
        let max = model.config().context_length;
        if !(4..=max).contains(&ctx) {
            return Err(EvalError::BadContext { got: ctx, max });
        }
        let blocks = ctx.div_ceil(BLOCK_SIZE);
        let exec = CpuExecutor::new(model, blocks, BLOCK_SIZE)?;
        Ok(Self {
            exec,
            block_tables: vec![(0..blocks as u32).collect()],
            ctx,
            logprobs: Vec::new(),
        })
    }

    pub fn vocab_size(&self) -> usize {
        self.exec.vocab_size()
    }

    /// Runs `chunk` (exactly `ctx` tokens; the first replaced by `bos` when given) and calls
    /// `visit(next_token, log_probs)` for each scored position in order, `log_probs` being the
    /// full-vocabulary log-softmax of that position's logits.
    pub fn score_chunk(
        &mut self,
        chunk: &[u32],
        bos: Option<u32>,
        plan: &ChunkPlan,
        mut visit: impl FnMut(u32, &[f32]),
    ) -> Result<(), EvalError> {
        debug_assert_eq!(chunk.len(), self.ctx);
        let mut tokens = chunk.to_vec();
        if let Some(b) = bos {
            tokens[0] = b;
        }
        let mut batch = ForwardBatch::from_seqs(
            &[SeqChunk {
                tokens: &tokens,
                start: 0,
                block_tables: &self.block_tables,
                logits: Logits::None,
            }],
            BLOCK_SIZE,
        );
        // Logits only for the scored rows: the LM head over the other half would be wasted.
        batch.logits_indices = (plan.first as u32..self.ctx as u32 - 1).collect();
        let vocab = self.exec.vocab_size();
        let logits = self.exec.forward(&batch)?;
        for (row, pos) in logits.chunks_exact(vocab).zip(plan.first..) {
            self.logprobs.clear();
            self.logprobs.extend_from_slice(row);
            log_softmax(&mut self.logprobs);
            visit(chunk[pos + 1], &self.logprobs);
        }
        Ok(())
    }
}

/// In place, with the sum in f64 so a 150k-entry vocabulary loses no precision.
pub fn log_softmax(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = x.iter().map(|&v| f64::from(v - max).exp()).sum();
    let log_z = max as f64 + sum.ln();
    for v in x {
        *v = (f64::from(*v) - log_z) as f32;
    }
}

/// Negative log-likelihoods of the scored tokens: perplexity and its standard error.
#[derive(Clone, Debug, Default)]
pub struct NllStats {
    sum: f64,
    sum_sq: f64,
    count: u64,
}

impl NllStats {
    pub fn add(&mut self, nll: f64) {
        self.sum += nll;
        self.sum_sq += nll * nll;
        self.count += 1;
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn mean(&self) -> f64 {
        self.sum / self.count.max(1) as f64
    }

    pub fn perplexity(&self) -> f64 {
        self.mean().exp()
    }

    /// The standard error of the mean NLL, carried to the perplexity (d exp(x) = exp(x) dx),
    /// as llama-perplexity reports `PPL +/- err`.
    pub fn perplexity_error(&self) -> f64 {
        if self.count < 2 {
            return 0.0;
        }
        let n = self.count as f64;
        let var = (self.sum_sq / n - self.mean().powi(2)).max(0.0);
        self.perplexity() * (var / (n - 1.0)).sqrt()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_whole_and_score_the_second_half() {
        let p = ChunkPlan::new(1100, 512, None).unwrap();
        assert_eq!((p.num_chunks, p.first, p.scored_per_chunk()), (2, 256, 255));
        assert_eq!(ChunkPlan::new(1100, 512, Some(1)).unwrap().num_chunks, 1);
        assert_eq!(ChunkPlan::new(1100, 512, Some(9)).unwrap().num_chunks, 2);
        assert!(matches!(
            ChunkPlan::new(100, 512, None),
            Err(EvalError::TextTooShort { tokens: 100, .. })
        ));
    }

    #[test]
    fn log_softmax_of_equal_logits_is_uniform() {
        let mut x = vec![3.5f32; 1000];
        log_softmax(&mut x);
        for v in x {
            assert!((v as f64 + (1000f64).ln()).abs() < 1e-6);
        }
    }

    #[test]
    fn perplexity_of_a_constant_nll_is_its_exponential_with_no_error() {
        let mut s = NllStats::default();
        for _ in 0..10 {
            s.add(2.0);
        }
        assert!((s.perplexity() - 2f64.exp()).abs() < 1e-12);
        assert!(s.perplexity_error() < 1e-9);
    }
}
