//! EmbeddingGemma's transformer: Gemma 3's blocks (`models/gemma3.rs`: the same weights, norms
//! and projections) with bidirectional attention (`attention.rs`) in place of the paged causal one, the sliding
//! layers seeing 256 tokens on each side of a token, then the final RMSNorm.

use pagoda_kernels::ops::{self, Rope};

use super::{EncoderScratch, Shape};
use crate::ModelError;
use crate::config::ModelConfig;
use crate::models::gemma3::Block;
use crate::models::{Activation, ForwardScratch, ensure, projections};
use crate::weights::{Matrix, Weights};

pub(crate) struct Gemma {
    config: ModelConfig,
    shape: Shape,
    token_embd: Matrix,
    blocks: Vec<Block>,
    output_norm: Vec<f32>,
    rope: Rope,
    rope_swa: Rope,
    /// The sliding layers' kernel window: keys with `|i - j| < window`.
    window: u32,
}

impl Gemma {
    pub(crate) fn load(weights: &Weights) -> Result<Self, ModelError> {
        let config = ModelConfig::from_gguf(weights.file())?;
        let c = &config;
        if c.causal {
            return Err(ModelError::BadKey {
                key: "gemma-embedding.attention.causal".into(),
                reason: "true: pagoda runs gemma-embedding as a bidirectional encoder".into(),
            });
        }
        let width = c.sliding_window.ok_or_else(|| {
            ModelError::MissingKey("gemma-embedding.attention.sliding_window".into())
        })?;
        // config.json's `sliding_window` (512) is the window's whole width: transformers'
        // Gemma3TextConfig turns it into `512 // 2 + 1` for bidirectional attention and masks
        // `|i - j| < 257`, as llama.cpp's symmetric SWA masks `|i - j| > 512 / 2`.
        let window = width / 2 + 1;
        let token_embd = weights.matrix("token_embd.weight", c.vocab_size, c.d_model)?;
        let blocks = (0..c.n_layers)
            .map(|il| Block::load(weights, c, il))
            .collect::<Result<_, _>>()?;
        let output_norm = weights.vector("output_norm.weight", c.d_model)?;
        let rope = Rope::new(c.head_dim, c.n_rot, c.rope_base, c.rope_style);
        let rope_swa = Rope::new(c.head_dim, c.n_rot, c.rope_base_swa, c.rope_style);
        let shape = Shape {
            vocab_size: c.vocab_size,
            d_model: c.d_model,
            n_layers: c.n_layers,
            n_heads: c.n_heads,
            ffn_dim: c.ffn_dim,
            eps: c.rms_eps,
            max_positions: c.context_length,
        };
        Ok(Self {
            config,
            shape,
            token_embd,
            blocks,
            output_norm,
            rope,
            rope_swa,
            window,
        })
    }

    pub(crate) fn shape(&self) -> &Shape {
        &self.shape
    }

    /// The final normed states `[T][d]` of `seqs` (checked by the caller), one after another.
    pub(crate) fn forward(&self, w: &Weights, seqs: &[&[u32]], s: &mut EncoderScratch) -> Vec<f32> {
        let c = &self.config;
        let d = c.d_model;
        let t: usize = seqs.iter().map(|s| s.len()).sum();
        let mut x = vec![0f32; t * d];
        let toks = seqs.iter().flat_map(|s| s.iter());
        for (row, &tok) in x.chunks_exact_mut(d).zip(toks) {
            w.dequantize_row(&self.token_embd, tok as usize, row);
            if let Some(scale) = c.embed_scale {
                ops::scale_inplace(row, scale);
            }
        }
        let positions: Vec<u32> = seqs.iter().flat_map(|s| 0..s.len() as u32).collect();
        let lens: Vec<usize> = seqs.iter().map(|s| s.len()).collect();
        let fs = &mut s.forward;
        fs.rope_angles[0].fill(&self.rope, &positions);
        fs.rope_angles[1].fill(&self.rope_swa, &positions);
        s.attention.plan(&lens);
        let (qd, kvd) = (c.q_dim(), c.kv_dim());
        for (il, block) in self.blocks.iter().enumerate() {
            let swa = c.is_swa_layer(il);
            let rope = if swa { &self.rope_swa } else { &self.rope };
            let window = swa.then_some(self.window);
            let seq_attention = &s.attention;
            let attend = |a: &_, h: &[f32], out: &mut [f32], fs: &mut ForwardScratch| {
                projections::qkv(w, c, rope, il, a, h, t, fs);
                let attn = ensure(&mut fs.attn, t * qd);
                seq_attention.attend(
                    (c.n_heads, c.n_kv_heads, c.head_dim),
                    c.attn_scale,
                    window,
                    &fs.q[..t * qd],
                    &fs.k[..t * kvd],
                    &fs.v[..t * kvd],
                    attn,
                );
                projections::output(w, c, il, a, t, out, fs);
            };
            let ffn = |f: &_, h: &[f32], t: usize, out: &mut [f32], fs: &mut ForwardScratch| {
                projections::ffn(w, c, il, f, Activation::GeluTanh, h, t, out, fs);
            };
            block.sandwich(&mut x, d, c.rms_eps, t, &mut s.forward, None, attend, ffn);
        }
        ops::rms_norm_rows(&mut x, &self.output_norm, c.rms_eps);
        x
    }
}
