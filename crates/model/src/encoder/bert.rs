//! The BERT stack over llama.cpp's `bert` GGUF names (what pagoda-hf converts a BertModel
//! checkpoint into): embeddings (token + position + token type, LayerNorm: type 0, and 1 for a
//! pair's second segment), then per layer
//! `x = LN(x + attn(x))`, `x = LN(x + down(gelu(up(x))))`, attention bidirectional.

use pagoda_kernels::ops::{bias_gelu_erf_rows, bias_residual_layer_norm_rows, layer_norm_rows};
use pagoda_kernels::parallel;

use super::{EncoderScratch, Shape, key_usize};
use crate::ModelError;
use crate::weights::{Linear, Matrix, Weights};

struct Layer {
    /// q, k and v stacked into one matrix when the file allows it (one product over the
    /// layer's input, its activations quantized once), else the three apart.
    qkv: Qkv,
    o: Linear,
    attn_norm: (Vec<f32>, Vec<f32>),
    up: Linear,
    down: Linear,
    out_norm: (Vec<f32>, Vec<f32>),
}

enum Qkv {
    Stacked(Linear),
    Apart(Box<[Linear; 3]>),
}

pub(crate) struct Bert {
    shape: Shape,
    token_embd: Matrix,
    position_embd: Matrix,
    token_types: Option<Matrix>,
    embd_norm: (Vec<f32>, Vec<f32>),
    layers: Vec<Layer>,
}

impl Bert {
    pub(crate) fn load(weights: &Weights) -> Result<Self, ModelError> {
        let file = weights.file();
        let k = |s: &str| format!("bert.{s}");
        let d = key_usize(file, &k("embedding_length"))?;
        let n_layers = key_usize(file, &k("block_count"))?;
        let n_heads = key_usize(file, &k("attention.head_count"))?;
        let ffn_dim = key_usize(file, &k("feed_forward_length"))?;
        let max_positions = key_usize(file, &k("context_length"))?;
        if n_heads == 0 || d % n_heads != 0 {
            return Err(ModelError::BadKey {
                key: k("attention.head_count"),
                reason: format!("{n_heads} heads do not divide {d}"),
            });
        }
        let eps = file
            .get_f32(&k("attention.layer_norm_epsilon"))?
            .unwrap_or(1e-12);
        let embd = file
            .tensor("token_embd.weight")
            .ok_or_else(|| ModelError::MissingTensor("token_embd.weight".into()))?;
        let vocab_size = embd.dims.get(1).copied().unwrap_or(0) as usize;
        let token_embd = weights.matrix("token_embd.weight", vocab_size, d)?;
        let position_embd = weights.matrix("position_embd.weight", max_positions, d)?;
        let token_types = match file.tensor("token_types.weight") {
            Some(t) => Some(weights.matrix(
                "token_types.weight",
                t.dims.get(1).copied().unwrap_or(1) as usize,
                d,
            )?),
            None => None,
        };
        let norm = |name: &str| -> Result<(Vec<f32>, Vec<f32>), ModelError> {
            Ok((
                weights.vector(&format!("{name}.weight"), d)?,
                weights.vector(&format!("{name}.bias"), d)?,
            ))
        };
        let embd_norm = norm("token_embd_norm")?;
        let lin = |name: &str, rows, cols| -> Result<Linear, ModelError> {
            Ok(weights.packed(weights.linear(name, rows, cols, true)?))
        };
        let qkv = |p: &str| -> Result<Qkv, ModelError> {
            let part = |n: &str| weights.linear(&format!("{p}.attn_{n}"), d, d, true);
            let (q, k, v) = (part("q")?, part("k")?, part("v")?);
            Ok(match weights.stacked(&[&q, &k, &v]) {
                Some(l) => Qkv::Stacked(weights.packed(l)),
                None => Qkv::Apart(Box::new([q, k, v].map(|l| weights.packed(l)))),
            })
        };
        let mut layers = Vec::with_capacity(n_layers);
        for il in 0..n_layers {
            let p = format!("blk.{il}");
            layers.push(Layer {
                qkv: qkv(&p)?,
                o: lin(&format!("{p}.attn_output"), d, d)?,
                attn_norm: norm(&format!("{p}.attn_output_norm"))?,
                up: lin(&format!("{p}.ffn_up"), ffn_dim, d)?,
                down: lin(&format!("{p}.ffn_down"), d, ffn_dim)?,
                out_norm: norm(&format!("{p}.layer_output_norm"))?,
            });
        }
        Ok(Self {
            shape: Shape {
                vocab_size,
                d_model: d,
                n_layers,
                n_heads,
                ffn_dim,
                eps,
                max_positions,
            },
            token_embd,
            position_embd,
            token_types,
            embd_norm,
            layers,
        })
    }

    pub(crate) fn shape(&self) -> &Shape {
        &self.shape
    }

    /// Token types the model has embeddings for (a pair needs 2).
    pub(crate) fn token_type_count(&self) -> usize {
        self.token_types.as_ref().map_or(0, |t| t.rows)
    }

    /// The last layer's states `[T][d]` of `seqs` (checked by the caller), one after another;
    /// the tokens of a sequence from `second[i]` on are of token type 1.
    pub(crate) fn forward(
        &self,
        w: &Weights,
        seqs: &[&[u32]],
        second: &[usize],
        s: &mut EncoderScratch,
    ) -> Vec<f32> {
        let c = &self.shape;
        let d = c.d_model;
        let total: usize = seqs.iter().map(|s| s.len()).sum();
        let mut x = vec![0f32; total * d];
        let mut row = vec![0f32; d];
        let mut types = [vec![0f32; d], vec![0f32; d]];
        if let Some(tt) = &self.token_types {
            for (i, t) in types.iter_mut().enumerate().take(tt.rows) {
                w.dequantize_row(tt, i, t);
            }
        }
        let mut at = 0;
        for (seq, &from) in seqs.iter().zip(second) {
            for (pos, &tok) in seq.iter().enumerate() {
                let xr = &mut x[at * d..(at + 1) * d];
                w.dequantize_row(&self.token_embd, tok as usize, xr);
                w.dequantize_row(&self.position_embd, pos, &mut row);
                let ty = &types[usize::from(pos >= from)];
                for ((x, p), t) in xr.iter_mut().zip(&row).zip(ty) {
                    *x += p + t;
                }
                at += 1;
            }
        }
        let (nw, nb) = (&self.embd_norm.0, &self.embd_norm.1);
        parallel::for_rows(total, [&mut x[..]], &|_, [x]| {
            layer_norm_rows(x, nw, nb, c.eps)
        });

        let (mut q, mut k, mut v) = (
            vec![0f32; total * d],
            vec![0f32; total * d],
            vec![0f32; total * d],
        );
        let mut attn = vec![0f32; total * d];
        let mut proj = vec![0f32; total * d];
        let mut hidden = vec![0f32; total * c.ffn_dim];
        let lens: Vec<usize> = seqs.iter().map(|s| s.len()).collect();
        s.attention.plan(&lens);
        let (m, tmp) = (&mut s.forward.matmul, &mut s.forward.stacked);
        let heads = (c.n_heads, c.n_heads, d / c.n_heads);
        let scale = 1.0 / ((d / c.n_heads) as f32).sqrt();
        for layer in &self.layers {
            match &layer.qkv {
                Qkv::Stacked(l) => {
                    w.forward_split(l, &x, total, &mut [&mut q, &mut k, &mut v], m, tmp)
                }
                Qkv::Apart(parts) => {
                    let [lq, lk, lv] = &**parts;
                    w.forward(lq, &x, total, &mut q, m);
                    w.forward(lk, &x, total, &mut k, m);
                    w.forward(lv, &x, total, &mut v, m);
                }
            }
            s.attention
                .attend(heads, scale, None, &q, &k, &v, &mut attn);
            w.product(&layer.o, &attn, total, &mut proj, m);
            residual_norm(&mut x, &proj, &layer.o, &layer.attn_norm, c.eps);
            w.product(&layer.up, &x, total, &mut hidden, m);
            let bias = layer.up.bias.as_deref();
            parallel::for_rows(total, [&mut hidden[..]], &|_, [h]| {
                bias_gelu_erf_rows(h, bias);
            });
            w.product(&layer.down, &hidden, total, &mut proj, m);
            residual_norm(&mut x, &proj, &layer.down, &layer.out_norm, c.eps);
        }
        x
    }
}

/// `x = LN(x + proj + bias of l)` in one pass per run of rows (the bias add, the residual add
/// and the post-norm), split over the pool.
fn residual_norm(x: &mut [f32], proj: &[f32], l: &Linear, norm: &(Vec<f32>, Vec<f32>), eps: f32) {
    let d = norm.0.len();
    let bias = l.bias.as_deref();
    parallel::for_rows(x.len() / d, [x], &|r, [x]| {
        let y = &proj[r.start * d..r.end * d];
        bias_residual_layer_norm_rows(x, y, bias, &norm.0, &norm.1, eps);
    });
}
