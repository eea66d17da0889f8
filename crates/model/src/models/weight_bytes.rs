//! How many bytes of weights a model instance holds: the matrices it multiplies by (the
//! stacked q/k/v and gate/up where it runs those), its norms and biases, its LM head, and the
//! token embedding where it embeds. A tensor-parallel rank or pipeline stage holds its part;
//! the start-up log, `/v1/models` and the tests compare these.

use super::{Attention, Blocks, Ffn, Model};
use crate::weights::{Linear, Matrix};

fn matrix(m: &Matrix) -> u64 {
    // `row_bytes` succeeded when the matrix was checked.
    (m.ty.row_bytes(m.cols).unwrap_or(0) * m.rows) as u64
}

fn linear(l: &Linear) -> u64 {
    matrix(&l.weight) + l.bias.as_ref().map_or(0, |b| 4 * b.len() as u64)
}

fn vector(v: &[f32]) -> u64 {
    4 * v.len() as u64
}

fn norm(v: Option<&Vec<f32>>) -> u64 {
    v.map_or(0, |v| vector(v))
}

impl Attention {
    pub(crate) fn weight_bytes(&self) -> u64 {
        let qkv = match &self.qkv {
            Some(l) => linear(l),
            None => linear(&self.q) + linear(&self.k) + linear(&self.v),
        };
        qkv + linear(&self.o) + norm(self.q_norm.as_ref()) + norm(self.k_norm.as_ref())
    }
}

impl Ffn {
    pub(crate) fn weight_bytes(&self) -> u64 {
        let gate_up = match &self.gate_up {
            Some(l) => linear(l),
            None => linear(&self.gate) + linear(&self.up),
        };
        gate_up + linear(&self.down)
    }
}

/// A block's weight bytes, given its norms.
pub(crate) fn block(attn: &Attention, ffn: &Ffn, norms: &[&[f32]]) -> u64 {
    attn.weight_bytes() + ffn.weight_bytes() + norms.iter().map(|n| vector(n)).sum::<u64>()
}

impl Model {
    /// Bytes of the weights this instance holds (its shard or stage).
    pub fn weight_bytes(&self) -> u64 {
        let blocks: u64 = match &self.blocks {
            Blocks::Llama(b) => b.iter().map(|b| b.weight_bytes()).sum(),
            Blocks::Gemma3(b) => b.iter().map(|b| b.weight_bytes()).sum(),
        };
        let embeds = self.stage.as_ref().is_none_or(|s| s.is_first());
        let head = match &self.lm_head {
            Some(l) => linear(l) + vector(&self.output_norm),
            None => 0,
        };
        blocks + head + if embeds { matrix(&self.token_embd) } else { 0 }
    }
}
