//! The paged KV arena: one K and one V buffer per arena slot, each `num_blocks` blocks of
//! `block_size` token slots (layout `[block][kv_head][slot][head_dim]`, as the attention kernel
//! reads it), of f16, f32 or int8 as `ModelConfig::kv_cache_dtype` says; int8 adds one f32 scale
//! per (block, kv head, slot) for K and for V, `[block][kv_head][slot]`. With one KV group a slot
//! of the arena is a layer; with several (`KvGroupPlan`) the layers of different groups share
//! slots and a block id belongs to one group. The executor owns it, never the model; who gets
//! which block is the caller's business.

use half::f16;
use pagoda_kernels::attention::KvLayout;

use crate::config::KvCacheDtype;
use crate::kv::groups::KvGroupPlan;
use crate::{ModelConfig, ModelError};

/// K and V arenas for every layer.
pub struct KvCache {
    layout: KvLayout,
    arenas: Arenas,
    plan: KvGroupPlan,
}

/// Per-slot K and V buffers of one element type.
pub enum Arenas {
    F32 {
        k: Vec<Vec<f32>>,
        v: Vec<Vec<f32>>,
    },
    F16 {
        k: Vec<Vec<f16>>,
        v: Vec<Vec<f16>>,
    },
    /// Values and, per slot, the scales of K and V rows.
    Int8 {
        k: Vec<Vec<i8>>,
        v: Vec<Vec<i8>>,
        k_scales: Vec<Vec<f32>>,
        v_scales: Vec<Vec<f32>>,
    },
}

impl KvCache {
    /// An arena of `num_blocks` blocks of `block_size` slots for each layer of `config`.
    pub fn new(
        config: &ModelConfig,
        num_blocks: usize,
        block_size: usize,
    ) -> Result<Self, ModelError> {
        Self::with_plan(
            config,
            KvGroupPlan::single(config.n_layers),
            num_blocks,
            block_size,
        )
    }

    /// Arenas for `plan`: `plan.layers_per_group()` K and V buffers of `num_blocks` blocks.
    pub fn with_plan(
        config: &ModelConfig,
        plan: KvGroupPlan,
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
        let slots = plan.layers_per_group().min(config.n_layers.max(1));
        // Zeroed allocations come from calloc, so untouched blocks cost no memory or start-up.
        let arenas = match config.kv_cache_dtype {
            KvCacheDtype::F32 => {
                let new = || (0..slots).map(|_| vec![0.0f32; per_layer]);
                Arenas::F32 {
                    k: new().collect(),
                    v: new().collect(),
                }
            }
            KvCacheDtype::F16 => {
                let new = || (0..slots).map(|_| zeroed_f16(per_layer));
                Arenas::F16 {
                    k: new().collect(),
                    v: new().collect(),
                }
            }
            KvCacheDtype::Int8 => {
                let new = || (0..slots).map(|_| vec![0i8; per_layer]);
                let scales = || (0..slots).map(|_| vec![0.0f32; layout.scales_len()]);
                Arenas::Int8 {
                    k: new().collect(),
                    v: new().collect(),
                    k_scales: scales().collect(),
                    v_scales: scales().collect(),
                }
            }
        };
        Ok(Self {
            layout,
            arenas,
            plan,
        })
    }

    pub fn dtype(&self) -> KvCacheDtype {
        match self.arenas {
            Arenas::F32 { .. } => KvCacheDtype::F32,
            Arenas::F16 { .. } => KvCacheDtype::F16,
            Arenas::Int8 { .. } => KvCacheDtype::Int8,
        }
    }

    /// Which table and arena each layer uses.
    pub fn plan(&self) -> &KvGroupPlan {
        &self.plan
    }

    /// Every slot's K and V buffers (layer `il` is slot `plan().slot(il)`).
    pub fn arenas_mut(&mut self) -> &mut Arenas {
        &mut self.arenas
    }

    /// The same, read-only.
    pub fn arenas(&self) -> &Arenas {
        &self.arenas
    }

    /// K (and V) buffers: one per layer of a KV group.
    pub fn num_arena_slots(&self) -> usize {
        match &self.arenas {
            Arenas::F32 { k, .. } => k.len(),
            Arenas::F16 { k, .. } => k.len(),
            Arenas::Int8 { k, .. } => k.len(),
        }
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

    /// Bytes held by all layers' K and V arenas (scales included).
    pub fn size_bytes(&self) -> usize {
        let sum = |n: usize, bytes: usize| n * bytes;
        match &self.arenas {
            Arenas::F32 { k, v } => sum(k.iter().chain(v).map(Vec::len).sum(), 4),
            Arenas::F16 { k, v } => sum(k.iter().chain(v).map(Vec::len).sum(), 2),
            Arenas::Int8 {
                k,
                v,
                k_scales,
                v_scales,
            } => {
                let values: usize = k.iter().chain(v).map(Vec::len).sum();
                let scales: usize = k_scales.iter().chain(v_scales).map(Vec::len).sum();
                values + sum(scales, 4)
            }
        }
    }
}

/// `len` zero f16s from calloc. `vec![f16::ZERO; n]` would write every element (std only
/// specialises zero-filling for primitive types), touching the whole arena at start-up.
fn zeroed_f16(len: usize) -> Vec<f16> {
    let mut zeros = std::mem::ManuallyDrop::new(vec![0u16; len]);
    // SAFETY: `f16` is `repr(transparent)` over `u16` (same size and alignment) and the all-zero
    // bit pattern is +0.0; the buffer's ownership moves to the new Vec exactly once.
    unsafe {
        Vec::from_raw_parts(
            zeros.as_mut_ptr().cast::<f16>(),
            zeros.len(),
            zeros.capacity(),
        )
    }
}
