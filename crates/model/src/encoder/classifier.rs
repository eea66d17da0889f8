//! A cross-encoder's head (transformers' `BertForSequenceClassification`): the [CLS] state
//! through the pooler (dense, then tanh) and the classifier (one row per label), giving each
//! sequence its labels' logits. llama.cpp's RANK pooling computes the same from `cls.*`.

use crate::ModelError;
use crate::models::ForwardScratch;
use crate::weights::{Linear, Weights};

pub(crate) struct Classifier {
    pooler: Linear,
    out: Linear,
}

impl Classifier {
    /// The head over states of `d` values: `cls.{weight,bias}` and `cls.output.{weight,bias}`.
    pub(crate) fn load(weights: &Weights, d: usize) -> Result<Self, ModelError> {
        let name = "cls.output.weight";
        let labels = weights
            .file()
            .tensor(name)
            .ok_or_else(|| ModelError::MissingTensor(name.into()))?
            .dims
            .get(1)
            .copied()
            .unwrap_or(1) as usize;
        Ok(Self {
            pooler: weights.linear("cls", d, d, true)?,
            out: weights.linear("cls.output", labels, d, true)?,
        })
    }

    /// Labels per sequence.
    pub(crate) fn labels(&self) -> usize {
        self.out.weight.rows
    }

    /// The logits of `n` sequences from their [CLS] states `cls` (`n` rows of `d`).
    pub(crate) fn logits(
        &self,
        w: &Weights,
        cls: &[f32],
        n: usize,
        scratch: &mut ForwardScratch,
    ) -> Vec<f32> {
        let mut pooled = vec![0f32; n * self.pooler.weight.rows];
        w.forward(&self.pooler, cls, n, &mut pooled, &mut scratch.matmul);
        pooled.iter_mut().for_each(|v| *v = v.tanh());
        let mut logits = vec![0f32; n * self.labels()];
        w.forward(&self.out, &pooled, n, &mut logits, &mut scratch.matmul);
        logits
    }
}
