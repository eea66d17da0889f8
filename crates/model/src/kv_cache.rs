//! The paged KV arena: one K and one V buffer per layer, each `num_blocks` blocks of
//! `block_size` token slots (layout `[block][kv_head][slot][head_dim]`, as the attention kernel
//! reads it). The executor owns it, never the model; who gets which block is the caller's business.

use pagoda_kernels::attention::KvLayout;

use crate::{ModelConfig, ModelError};

/// K and V arenas for every layer.
pub struct KvCache {
    layout: KvLayout,
    k: Vec<Vec<f32>>,
    v: Vec<Vec<f32>>,
}

impl KvCache {
    /// An arena of `num_blocks` blocks of `block_size` slots for each layer of `config`.
    pub fn new(
        config: &ModelConfig,
        num_blocks: usize,
        block_size: usize,
    ) -> Result<Self, ModelError> {
        if num_blocks == 0 || block_size == 0 {
            return Err(ModelError::InvalidRequest(format!(
                "KV arena needs at least one block of one slot, got {num_blocks} blocks of {block_size}"
            )));
        }
        let layout = KvLayout {
            num_blocks,
            block_size,
            num_kv_heads: config.n_kv_heads,
            head_dim: config.head_dim,
        };
        let per_layer = num_blocks
            .checked_mul(block_size)
            .and_then(|n| n.checked_mul(config.kv_dim()))
            .ok_or_else(|| {
                ModelError::InvalidRequest(format!(
                    "KV arena of {num_blocks} x {block_size} overflows"
                ))
            })?;
        let k = (0..config.n_layers)
            .map(|_| vec![0.0f32; per_layer])
            .collect();
        let v = (0..config.n_layers)
            .map(|_| vec![0.0f32; per_layer])
            .collect();
        Ok(Self { layout, k, v })
    }

    pub fn layout(&self) -> &KvLayout {
        &self.layout
    }

    pub fn num_blocks(&self) -> usize {
        self.layout.num_blocks
    }

    pub fn block_size(&self) -> usize {
        self.layout.block_size
    }

    /// Total token slots (`num_blocks * block_size`).
    pub fn num_slots(&self) -> usize {
        self.layout.num_blocks * self.layout.block_size
    }

    /// Bytes held by all layers' K and V arenas.
    pub fn size_bytes(&self) -> usize {
        self.k.iter().chain(&self.v).map(|b| b.len() * 4).sum()
    }

    /// The K and V arenas of layer `il`.
    pub fn layer_mut(&mut self, il: usize) -> (&mut [f32], &mut [f32]) {
        (&mut self.k[il], &mut self.v[il])
    }

    /// The K and V arenas of layer `il`, read-only.
    pub fn layer(&self, il: usize) -> (&[f32], &[f32]) {
        (&self.k[il], &self.v[il])
    }
}
