//! The BERT encoder over llama.cpp's `bert` GGUF names (what pagoda-hf converts a BertModel
//! checkpoint into): embeddings (token + position + token type 0, LayerNorm), then per layer
//! `x = LN(x + attn(x))`, `x = LN(x + down(gelu(up(x))))`, then pooling, Dense projections
//! and normalisation as the file's `pagoda.embedding.*` keys say.

use std::sync::Arc;

use pagoda_gguf::GgufFile;
use pagoda_kernels::matmul::MatmulScratch;
use pagoda_kernels::ops::{gelu_erf_inplace, layer_norm_rows, softmax_inplace};

use super::pooling::{Pooling, l2_normalize};
use crate::ModelError;
use crate::weights::{Linear, Matrix, Weights};

/// The shape and output options of an encoder.
#[derive(Clone, Debug)]
pub struct EncoderConfig {
    pub vocab_size: usize,
    pub d_model: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub ffn_dim: usize,
    pub eps: f32,
    /// Rows of the position embedding.
    pub max_positions: usize,
    /// Longest input in tokens (sentence-transformers' `max_seq_length`, at most
    /// `max_positions`).
    pub max_seq_len: usize,
    pub pooling: Pooling,
    pub normalize: bool,
    /// Length of the output vectors (after the Dense projections).
    pub output_dim: usize,
}

struct Layer {
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    attn_norm: (Vec<f32>, Vec<f32>),
    up: Linear,
    down: Linear,
    out_norm: (Vec<f32>, Vec<f32>),
}

/// A loaded encoder; stateless, so one instance serves any number of batches (not at once:
/// `embed` takes `&mut` scratch through its caller).
pub struct Encoder {
    config: EncoderConfig,
    weights: Weights,
    token_embd: Matrix,
    position_embd: Matrix,
    token_types: Option<Matrix>,
    embd_norm: (Vec<f32>, Vec<f32>),
    layers: Vec<Layer>,
    dense: Vec<Linear>,
}

fn key_usize(file: &GgufFile, key: &str) -> Result<usize, ModelError> {
    file.get_usize(key)?
        .ok_or_else(|| ModelError::MissingKey(key.to_owned()))
}

impl Encoder {
    pub fn load(file: Arc<GgufFile>) -> Result<Self, ModelError> {
        let arch = file
            .get_str("general.architecture")?
            .unwrap_or_default()
            .to_owned();
        if arch != "bert" {
            return Err(ModelError::UnsupportedArchitecture(arch));
        }
        let k = |s: &str| format!("bert.{s}");
        let d = key_usize(&file, &k("embedding_length"))?;
        let n_layers = key_usize(&file, &k("block_count"))?;
        let n_heads = key_usize(&file, &k("attention.head_count"))?;
        let ffn_dim = key_usize(&file, &k("feed_forward_length"))?;
        let max_positions = key_usize(&file, &k("context_length"))?;
        if n_heads == 0 || d % n_heads != 0 {
            return Err(ModelError::BadKey {
                key: k("attention.head_count"),
                reason: format!("{n_heads} heads do not divide {d}"),
            });
        }
        let eps = file
            .get_f32(&k("attention.layer_norm_epsilon"))?
            .unwrap_or(1e-12);
        let pooling = Pooling::from_gguf(file.get_u32(&k("pooling_type"))?.unwrap_or(1))?;
        let normalize = file
            .get_bool("pagoda.embedding.normalize")?
            .unwrap_or(false);
        let max_seq_len = file
            .get_usize("pagoda.embedding.max_seq_length")?
            .unwrap_or(max_positions)
            .min(max_positions);
        let n_dense = file.get_usize("pagoda.embedding.dense_count")?.unwrap_or(0);

        let weights = Weights::new(Arc::clone(&file));
        let embd = weights
            .file()
            .tensor("token_embd.weight")
            .ok_or_else(|| ModelError::MissingTensor("token_embd.weight".into()))?;
        let vocab_size = embd.dims.get(1).copied().unwrap_or(0) as usize;
        let token_embd = weights.matrix("token_embd.weight", vocab_size, d)?;
        let position_embd = weights.matrix("position_embd.weight", max_positions, d)?;
        let token_types = match weights.file().tensor("token_types.weight") {
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
        let mut layers = Vec::with_capacity(n_layers);
        for il in 0..n_layers {
            let p = format!("blk.{il}");
            layers.push(Layer {
                q: lin(&format!("{p}.attn_q"), d, d)?,
                k: lin(&format!("{p}.attn_k"), d, d)?,
                v: lin(&format!("{p}.attn_v"), d, d)?,
                o: lin(&format!("{p}.attn_output"), d, d)?,
                attn_norm: norm(&format!("{p}.attn_output_norm"))?,
                up: lin(&format!("{p}.ffn_up"), ffn_dim, d)?,
                down: lin(&format!("{p}.ffn_down"), d, ffn_dim)?,
                out_norm: norm(&format!("{p}.layer_output_norm"))?,
            });
        }
        let mut dense = Vec::with_capacity(n_dense);
        let mut dim = d;
        for i in 0..n_dense {
            let name = format!("dense.{i}.weight");
            let t = weights
                .file()
                .tensor(&name)
                .ok_or_else(|| ModelError::MissingTensor(name.clone()))?;
            let rows = t.dims.get(1).copied().unwrap_or(0) as usize;
            let bias = weights.has(&format!("dense.{i}.bias"));
            dense.push(weights.packed(weights.linear(&format!("dense.{i}"), rows, dim, bias)?));
            dim = rows;
        }
        Ok(Self {
            config: EncoderConfig {
                vocab_size,
                d_model: d,
                n_layers,
                n_heads,
                ffn_dim,
                eps,
                max_positions,
                max_seq_len,
                pooling,
                normalize,
                output_dim: dim,
            },
            weights,
            token_embd,
            position_embd,
            token_types,
            embd_norm,
            layers,
            dense,
        })
    }

    pub fn config(&self) -> &EncoderConfig {
        &self.config
    }

    /// One embedding per sequence, all sequences in one forward pass. Each sequence must be
    /// non-empty, at most `max_seq_len` tokens, of ids in the vocabulary.
    pub fn embed(
        &self,
        seqs: &[&[u32]],
        scratch: &mut MatmulScratch,
    ) -> Result<Vec<Vec<f32>>, ModelError> {
        let c = &self.config;
        for (i, s) in seqs.iter().enumerate() {
            if s.is_empty() || s.len() > c.max_seq_len {
                return Err(ModelError::InvalidBatch(format!(
                    "sequence {i} has {} tokens (1 to {} allowed)",
                    s.len(),
                    c.max_seq_len
                )));
            }
            if let Some(&t) = s.iter().find(|&&t| t as usize >= c.vocab_size) {
                return Err(ModelError::InvalidBatch(format!(
                    "token {t} outside the vocabulary of {}",
                    c.vocab_size
                )));
            }
        }
        let d = c.d_model;
        let total: usize = seqs.iter().map(|s| s.len()).sum();
        let mut x = vec![0f32; total * d];
        let mut row = vec![0f32; d];
        let mut type0 = vec![0f32; d];
        if let Some(tt) = &self.token_types {
            self.weights.dequantize_row(tt, 0, &mut type0);
        }
        let mut at = 0;
        for s in seqs {
            for (pos, &tok) in s.iter().enumerate() {
                let xr = &mut x[at * d..(at + 1) * d];
                self.weights
                    .dequantize_row(&self.token_embd, tok as usize, xr);
                self.weights
                    .dequantize_row(&self.position_embd, pos, &mut row);
                for ((x, p), t) in xr.iter_mut().zip(&row).zip(&type0) {
                    *x += p + t;
                }
                at += 1;
            }
        }
        layer_norm_rows(&mut x, &self.embd_norm.0, &self.embd_norm.1, c.eps);

        let (mut q, mut k, mut v) = (
            vec![0f32; total * d],
            vec![0f32; total * d],
            vec![0f32; total * d],
        );
        let mut attn = vec![0f32; total * d];
        let mut proj = vec![0f32; total * d];
        let mut hidden = vec![0f32; total * c.ffn_dim];
        for layer in &self.layers {
            self.weights.forward(&layer.q, &x, total, &mut q, scratch);
            self.weights.forward(&layer.k, &x, total, &mut k, scratch);
            self.weights.forward(&layer.v, &x, total, &mut v, scratch);
            self.attention(seqs, &q, &k, &v, &mut attn);
            self.weights
                .forward(&layer.o, &attn, total, &mut proj, scratch);
            add_rows(&mut x, &proj);
            layer_norm_rows(&mut x, &layer.attn_norm.0, &layer.attn_norm.1, c.eps);
            self.weights
                .forward(&layer.up, &x, total, &mut hidden, scratch);
            gelu_erf_inplace(&mut hidden);
            self.weights
                .forward(&layer.down, &hidden, total, &mut proj, scratch);
            add_rows(&mut x, &proj);
            layer_norm_rows(&mut x, &layer.out_norm.0, &layer.out_norm.1, c.eps);
        }

        let mut out = Vec::with_capacity(seqs.len());
        let mut start = 0;
        for s in seqs {
            let mut pooled = vec![0f32; d];
            c.pooling
                .pool(&x[start * d..(start + s.len()) * d], d, &mut pooled);
            start += s.len();
            for l in &self.dense {
                let mut y = vec![0f32; l.weight.rows];
                self.weights.forward(l, &pooled, 1, &mut y, scratch);
                pooled = y;
            }
            if c.normalize {
                l2_normalize(&mut pooled);
            }
            out.push(pooled);
        }
        Ok(out)
    }

    /// Bidirectional multi-head attention of each sequence over its own tokens.
    fn attention(&self, seqs: &[&[u32]], q: &[f32], k: &[f32], v: &[f32], out: &mut [f32]) {
        let c = &self.config;
        let (d, hd) = (c.d_model, c.d_model / c.n_heads);
        let scale = 1.0 / (hd as f32).sqrt();
        let mut start = 0;
        let mut scores = Vec::new();
        for s in seqs {
            let n = s.len();
            scores.resize(n, 0.0);
            for h in 0..c.n_heads {
                for i in 0..n {
                    let qi = &q[(start + i) * d + h * hd..(start + i) * d + (h + 1) * hd];
                    for (j, sc) in scores.iter_mut().enumerate() {
                        let kj = &k[(start + j) * d + h * hd..(start + j) * d + (h + 1) * hd];
                        *sc = qi.iter().zip(kj).map(|(a, b)| a * b).sum::<f32>() * scale;
                    }
                    softmax_inplace(&mut scores);
                    let o = &mut out[(start + i) * d + h * hd..(start + i) * d + (h + 1) * hd];
                    o.fill(0.0);
                    for (j, &p) in scores.iter().enumerate() {
                        let vj = &v[(start + j) * d + h * hd..(start + j) * d + (h + 1) * hd];
                        for (o, &vv) in o.iter_mut().zip(vj) {
                            *o += p * vv;
                        }
                    }
                }
            }
            start += n;
        }
    }
}

fn add_rows(x: &mut [f32], y: &[f32]) {
    for (a, b) in x.iter_mut().zip(y) {
        *a += b;
    }
}
