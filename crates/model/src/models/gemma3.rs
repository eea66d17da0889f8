//! The Gemma 3 block, following llama.cpp `llm_build_gemma3`: "sandwich" norms around both
//! attention and FFN, per-head RMSNorm on q and k, GeGLU (tanh GELU). The stored norm weights
//! already include Gemma's `+1` (convert_hf_to_gguf adds it), so every norm is plain `x * w`.

use super::{
    Activation, Attention, Ffn, ForwardScratch, Model, OutputRows, ensure, projections, rows,
};
use crate::config::ModelConfig;
use crate::tensor_parallel::Shard;
use crate::weights::Weights;
use crate::{ForwardBatch, KvCache, ModelError};

pub(crate) struct Block {
    attn_norm: Vec<f32>,
    attn: Attention,
    post_attention_norm: Vec<f32>,
    ffn_norm: Vec<f32>,
    ffn: Ffn,
    post_ffw_norm: Vec<f32>,
}

impl Block {
    pub(crate) fn load(w: &Weights, c: &ModelConfig, il: usize) -> Result<Self, ModelError> {
        Self::load_shard(w, c, il, &Shard::whole(c))
    }

    /// A tensor-parallel rank's part of the block (`shard`'s heads and FFN columns).
    pub(crate) fn load_shard(
        w: &Weights,
        c: &ModelConfig,
        il: usize,
        shard: &Shard,
    ) -> Result<Self, ModelError> {
        let v = |name: &str| w.vector(&format!("blk.{il}.{name}.weight"), c.d_model);
        Ok(Self {
            attn_norm: v("attn_norm")?,
            attn: Attention::load(w, c, il, (false, true), shard)?,
            post_attention_norm: v("post_attention_norm")?,
            ffn_norm: v("ffn_norm")?,
            ffn: Ffn::load(w, c, il, shard)?,
            post_ffw_norm: v("post_ffw_norm")?,
        })
    }

    pub(crate) fn weight_bytes(&self) -> u64 {
        let norms = [
            &self.attn_norm[..],
            &self.post_attention_norm,
            &self.ffn_norm,
            &self.post_ffw_norm,
        ];
        super::weight_bytes::block(&self.attn, &self.ffn, &norms)
    }

    /// `x += norm(attn(norm(x))); x += norm(ffn(norm(x)))` over the batch's T rows (the
    /// last layer: past its attention, over the rows `keep` names). The
    /// sliding window and its RoPE base are chosen per layer inside `Model::attention`.
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
        let (d, eps) = (m.config.d_model, m.config.rms_eps);
        // With tensor parallelism each output is a partial sum: summed over the ranks before
        // its norm.
        let t_out = keep.map_or(batch.num_tokens(), |o| o.len());
        let attend = |a: &Attention, h: &[f32], out: &mut [f32], s: &mut ForwardScratch| {
            m.attention(il, a, h, out, batch, kv, s, keep);
            m.all_reduce(&mut out[..t_out * d]);
        };
        let ffn = |f: &Ffn, h: &[f32], t: usize, out: &mut [f32], s: &mut ForwardScratch| {
            projections::ffn(
                &m.weights,
                &m.config,
                il,
                f,
                Activation::GeluTanh,
                h,
                t,
                out,
                s,
            );
            m.all_reduce(&mut out[..t * d]);
        };
        self.sandwich(x, d, eps, batch.num_tokens(), s, keep, attend, ffn);
    }

    /// The block's graph over `t` rows of `x` with the attention and FFN it is handed (the
    /// decoder's paged attention or an encoder's bidirectional one): the norms around them
    /// and the residual adds. `attend` writes `keep.len()` rows when `keep` is given.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn sandwich(
        &self,
        x: &mut [f32],
        d: usize,
        eps: f32,
        t: usize,
        s: &mut ForwardScratch,
        keep: Option<&OutputRows>,
        mut attend: impl FnMut(&Attention, &[f32], &mut [f32], &mut ForwardScratch),
        mut ffn: impl FnMut(&Ffn, &[f32], usize, &mut [f32], &mut ForwardScratch),
    ) {
        let mut h = std::mem::take(&mut s.h);
        let mut out = std::mem::take(&mut s.out);
        let (hb, ob) = (ensure(&mut h, t * d), ensure(&mut out, t * d));

        rows::rms_norm_into(x, &self.attn_norm, eps, hb);
        attend(&self.attn, hb, ob, s);
        // Past the attention only the kept rows go on.
        let (t, x) = OutputRows::narrow(keep, x, d);
        let (hb, ob) = (&mut hb[..t * d], &mut ob[..t * d]);
        rows::add_normed(x, ob, &self.post_attention_norm, eps);

        rows::rms_norm_into(x, &self.ffn_norm, eps, hb);
        ffn(&self.ffn, hb, t, ob, s);
        rows::add_normed(x, ob, &self.post_ffw_norm, eps);

        s.h = h;
        s.out = out;
    }
}
