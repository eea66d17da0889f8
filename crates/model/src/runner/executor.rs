//! `CpuExecutor`: a model, the KV arena it writes into, and the scratch buffers of a forward
//! pass. One `forward` call runs one flat batch: the linear layers once over all T rows,
//! attention per request over its own blocks, the LM head only over `logits_indices`.

use std::sync::Arc;

use crate::lora::LoraAdapter;
use crate::models::{ForwardScratch, Model};
use crate::{ForwardBatch, KvCache, KvGroupPlan, ModelError};

/// Runs forward passes of one model on the CPU.
pub struct CpuExecutor {
    pub model: Model,
    pub kv_cache: KvCache,
    scratch: ForwardScratch,
}

impl CpuExecutor {
    /// An executor with a fresh arena of `num_blocks` blocks of `block_size` slots per layer.
    pub fn new(model: Model, num_blocks: usize, block_size: usize) -> Result<Self, ModelError> {
        let plan = KvGroupPlan::single(model.config().n_layers);
        Self::with_plan(model, plan, num_blocks, block_size)
    }

    /// An executor whose layers read the block tables `plan` assigns them.
    pub fn with_plan(
        model: Model,
        plan: KvGroupPlan,
        num_blocks: usize,
        block_size: usize,
    ) -> Result<Self, ModelError> {
        let kv_cache = KvCache::with_plan(model.config(), plan, num_blocks, block_size)?;
        Ok(Self {
            model,
            kv_cache,
            scratch: ForwardScratch::default(),
        })
    }

    /// Validates `batch`, runs it, and returns the logits rows `[logits_indices.len()][vocab]`.
    pub fn forward(&mut self, batch: &ForwardBatch) -> Result<&[f32], ModelError> {
        self.forward_with_loras(batch, &[])
    }

    /// [`CpuExecutor::forward`] where `batch.seq_loras` picks each sequence's adapter from
    /// `adapters` (each checked to fit this model).
    pub fn forward_with_loras(
        &mut self,
        batch: &ForwardBatch,
        adapters: &[Arc<LoraAdapter>],
    ) -> Result<&[f32], ModelError> {
        let c = self.model.config();
        batch.validate(
            c.vocab_size,
            self.kv_cache.num_blocks(),
            self.kv_cache.block_size(),
            self.kv_cache.plan().groups(),
        )?;
        if let Some(i) = batch
            .seq_loras
            .iter()
            .flatten()
            .find(|&&i| i as usize >= adapters.len())
        {
            return Err(ModelError::InvalidBatch(format!(
                "seq_loras names adapter {i} of {}",
                adapters.len()
            )));
        }
        if let Some(i) = adapters.iter().position(|a| !a.fits(c)) {
            return Err(ModelError::InvalidBatch(format!(
                "adapter {i} was built for another model shape"
            )));
        }
        Ok(self
            .model
            .forward(batch, adapters, &mut self.kv_cache, &mut self.scratch))
    }

    pub fn vocab_size(&self) -> usize {
        self.model.config().vocab_size
    }
}
