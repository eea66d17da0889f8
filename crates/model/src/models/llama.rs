//! The llama block (also Qwen2, which adds q/k/v biases, and Qwen3, which norms q and k per
//! head before RoPE): pre-norm attention and SwiGLU FFN, each added to the residual stream.
//! Follows llama.cpp `llm_build_llama` / `llm_build_qwen2` / `llm_build_qwen3`.

use super::{
    Activation, Attention, Ffn, ForwardScratch, Model, OutputRows, ensure, projections, rows,
};
use crate::config::{Architecture, ModelConfig};
use crate::tensor_parallel::Shard;
use crate::weights::Weights;
use crate::{ForwardBatch, KvCache, ModelError};

pub(crate) struct Block {
    attn_norm: Vec<f32>,
    attn: Attention,
    ffn_norm: Vec<f32>,
    ffn: Ffn,
}

impl Block {
    pub(crate) fn load(
        w: &Weights,
        c: &ModelConfig,
        il: usize,
        shard: &Shard,
    ) -> Result<Self, ModelError> {
        let qkv_bias = c.architecture == Architecture::Qwen2;
        let qk_norm = c.architecture == Architecture::Qwen3;
        Ok(Self {
            attn_norm: w.vector(&format!("blk.{il}.attn_norm.weight"), c.d_model)?,
            attn: Attention::load(w, c, il, (qkv_bias, qk_norm), shard)?,
            ffn_norm: w.vector(&format!("blk.{il}.ffn_norm.weight"), c.d_model)?,
            ffn: Ffn::load(w, c, il, shard)?,
        })
    }

    pub(crate) fn weight_bytes(&self) -> u64 {
        super::weight_bytes::block(&self.attn, &self.ffn, &[&self.attn_norm, &self.ffn_norm])
    }

    /// `x += attn(norm(x)); x += ffn(norm(x))` over the batch's T rows (the
    /// last layer: past its attention, over the rows `keep` names).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn forward(
        &self,
        m: &Model,
        il: usize,
        x: &mut [f32],
        batch: &ForwardBatch,
        kv: &mut KvCache,
        s: &mut ForwardScratch,
        keep: Option<&OutputRows>,
    ) {
        let (d, eps, t) = (m.config.d_model, m.config.rms_eps, batch.num_tokens());
        let mut h = std::mem::take(&mut s.h);
        let mut out = std::mem::take(&mut s.out);
        let (hb, ob) = (ensure(&mut h, t * d), ensure(&mut out, t * d));

        rows::rms_norm_into(x, &self.attn_norm, eps, hb);
        m.attention(il, &self.attn, hb, ob, batch, kv, s, keep);
        // Past the attention only the kept rows go on.
        let (t, x) = OutputRows::narrow(keep, x, d);
        let (hb, ob) = (&mut hb[..t * d], &mut ob[..t * d]);
        m.all_reduce(ob);
        rows::add(x, ob, t);

        rows::rms_norm_into(x, &self.ffn_norm, eps, hb);
        projections::ffn(
            &m.weights,
            &m.config,
            il,
            &self.ffn,
            Activation::Silu,
            hb,
            t,
            ob,
            s,
        );
        m.all_reduce(ob);
        rows::add(x, ob, t);

        s.h = h;
        s.out = out;
    }
}
