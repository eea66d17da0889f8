//! The forward pass over a flat batch, in three parts a pipeline stage runs separately: the
//! token embedding (`embed`, stage 0), the held layers (`run_layers`), and the final norm and
//! LM head (`head`, the last stage; with tensor parallelism each rank's vocabulary rows,
//! gathered). Without a pipeline `forward` runs all three.

use std::sync::Arc;

use pagoda_kernels::ops;

use super::{Blocks, ForwardScratch, Model, ensure};
use crate::lora::LoraAdapter;
use crate::{ForwardBatch, KvCache};

impl Model {
    /// Runs `batch` (already validated against this model, `adapters` and `kv`) and returns the
    /// logits rows `[logits_indices.len()][vocab]` (a pipeline stage other than rank 0's:
    /// nothing; rank 0 gets the last stage's).
    pub(crate) fn forward<'s>(
        &self,
        batch: &ForwardBatch,
        adapters: &[Arc<LoraAdapter>],
        kv: &mut KvCache,
        s: &'s mut ForwardScratch,
    ) -> &'s [f32] {
        if let Some(stage) = &self.stage {
            return crate::pipeline_parallel::step::run(stage, self, batch, adapters, kv, s);
        }
        self.embed(batch, s);
        let pruned = self.run_layers(batch, adapters, kv, s);
        self.head(batch, pruned, s)
    }

    /// `s.x[..t][..d]` = the batch's token embeddings.
    pub(crate) fn embed(&self, batch: &ForwardBatch, s: &mut ForwardScratch) {
        let c = &self.config;
        let (t, d) = (batch.num_tokens(), c.d_model);
        let x = ensure(&mut s.x, t * d);
        for (row, &tok) in x.chunks_exact_mut(d).zip(&batch.token_ids) {
            self.weights
                .dequantize_row(&self.token_embd, tok as usize, row);
            if let Some(scale) = c.embed_scale {
                ops::scale_inplace(row, scale);
            }
        }
    }

    /// Runs the held layers over the residual stream `s.x`. True when the model's last layer
    /// was among them and kept only the rows whose logits are wanted (then `s.x`'s first rows
    /// are those rows, in order).
    pub(crate) fn run_layers(
        &self,
        batch: &ForwardBatch,
        adapters: &[Arc<LoraAdapter>],
        kv: &mut KvCache,
        s: &mut ForwardScratch,
    ) -> bool {
        let c = &self.config;
        let (t, d) = (batch.num_tokens(), c.d_model);
        s.rope_angles[0].fill(&self.rope, &batch.positions);
        if c.sliding_window.is_some() {
            s.rope_angles[1].fill(&self.rope_swa, &batch.positions);
        }
        let mut x = std::mem::take(&mut s.x);
        ensure(&mut x, t * d);
        let mut out_rows = std::mem::take(&mut s.output_rows);
        // Only the model's last layer drops rows (and the LM head then reads them compacted).
        let holds_last = self.layers.end == c.n_layers && !self.layers.is_empty();
        let pruned = holds_last && out_rows.plan(batch);
        let kept: &[u32] = if pruned { out_rows.rows() } else { &[] };
        s.lora.plan(batch, adapters, kept);
        let keep = |il: usize| (pruned && il + 1 == c.n_layers).then_some(&out_rows);
        let first = self.layers.start;
        match &self.blocks {
            Blocks::Llama(blocks) => {
                for (i, b) in blocks.iter().enumerate() {
                    let il = first + i;
                    b.forward(self, il, &mut x[..t * d], batch, kv, s, keep(il));
                }
            }
            Blocks::Gemma3(blocks) => {
                for (i, b) in blocks.iter().enumerate() {
                    let il = first + i;
                    b.forward(self, il, &mut x[..t * d], batch, kv, s, keep(il));
                }
            }
        }
        s.output_rows = out_rows;
        s.lora.clear();
        s.x = x;
        pruned
    }

    /// The final norm and LM head over the rows of `s.x` whose logits `batch` wants (after a
    /// pruned last layer they are its first rows, in order): `[logits_indices.len()][vocab]`.
    /// Empty on a pipeline stage that does not hold the head.
    pub(crate) fn head<'s>(
        &self,
        batch: &ForwardBatch,
        pruned: bool,
        s: &'s mut ForwardScratch,
    ) -> &'s [f32] {
        let Some(lm_head) = &self.lm_head else {
            return &[];
        };
        let c = &self.config;
        let d = c.d_model;
        let n = batch.logits_indices.len();
        let sel = ensure(&mut s.selected, n * d);
        for (j, (row, &i)) in sel
            .chunks_exact_mut(d)
            .zip(&batch.logits_indices)
            .enumerate()
        {
            let i = if pruned { j } else { i as usize };
            ops::rms_norm(&s.x[i * d..][..d], &self.output_norm, c.rms_eps, row);
        }
        let vocab = c.vocab_size;
        let Some(tp) = &self.tp else {
            // A draft's narrowed head (`keep_head_rows`) gives rows narrower than the vocabulary.
            let vocab = lm_head.weight.rows;
            let logits = ensure(&mut s.logits, n * vocab);
            let sel = &s.selected[..n * d];
            self.weights.forward(lm_head, sel, n, logits, &mut s.matmul);
            return &s.logits[..n * vocab];
        };
        // Each rank's vocabulary rows, gathered in rank order, then put back row by row.
        let part = self.shard.vocab.len();
        let local = ensure(&mut s.local_logits, n * part);
        let sel = &s.selected[..n * d];
        self.weights.forward(lm_head, sel, n, local, &mut s.matmul);
        let gathered = ensure(&mut s.gathered, n * vocab);
        tp.all_gather(&s.local_logits[..n * part], gathered);
        let logits = ensure(&mut s.logits, n * vocab);
        let mut at = 0;
        for cols in &self.shard.vocab_parts {
            for (row, src) in logits
                .chunks_exact_mut(vocab)
                .zip(s.gathered[at..at + n * cols.len()].chunks_exact(cols.len().max(1)))
            {
                row[cols.clone()].copy_from_slice(src);
            }
            at += n * cols.len();
        }
        &s.logits[..n * vocab]
    }
}
