//! Encoders for embeddings: a BERT stack (post-norm LayerNorm, erf GELU, absolute positions)
//! and EmbeddingGemma's (Gemma 3's blocks, bidirectional), both attending bidirectionally
//! over whole sequences (`attention.rs`, no KV), then sentence-transformers' pooling, Dense projections
//! and L2 normalisation, or a cross-encoder's classifier head (`classifier.rs`). An encoder
//! keeps no KV cache: `embed` runs whole sequences, every linear layer once over all of their
//! tokens.

mod attention;
mod bert;
mod classifier;
mod gemma;
mod pooling;

use std::sync::Arc;

use pagoda_gguf::{GgufFile, MetaArray};

use crate::ModelError;
use crate::models::ForwardScratch;
use crate::weights::{Linear, Weights};
use attention::SeqAttention;
use bert::Bert;
use classifier::Classifier;
use gemma::Gemma;
pub use pooling::{Pooling, l2_normalize, truncate_normalized};

/// The shape and output options of an encoder.
#[derive(Clone, Debug)]
pub struct EncoderConfig {
    pub vocab_size: usize,
    pub d_model: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub ffn_dim: usize,
    pub eps: f32,
    /// Positions the model has (BERT's position embedding rows, Gemma's context length).
    pub max_positions: usize,
    /// Longest input in tokens (sentence-transformers' `max_seq_length`, at most
    /// `max_positions`).
    pub max_seq_len: usize,
    pub pooling: Pooling,
    pub normalize: bool,
    /// Length of the output vectors (after the Dense projections); a cross-encoder's: its
    /// labels' logits (1: the pair's relevance).
    pub output_dim: usize,
    /// A cross-encoder (`Pooling::Rank` with a classifier head): its input is a pair of texts
    /// and its output their logits, not an embedding.
    pub cross_encoder: bool,
    /// Lengths a vector may be cut to (a Matryoshka model's, the full one included); empty
    /// when the model was not trained for it.
    pub matryoshka_dimensions: Vec<usize>,
    /// sentence-transformers' prompts: a name and the text put before an input.
    pub prompts: Vec<(String, String)>,
    /// The prompt an input gets when its request names none.
    pub default_prompt_name: Option<String>,
    /// False when the model's pooling leaves a prompt's tokens out (which `embed` does not
    /// do): prompts are then not to be used.
    pub prompt_in_pooling: bool,
}

/// The transformer part of an encoder's shape, as its stack reads it.
#[derive(Clone, Debug)]
pub(crate) struct Shape {
    pub(crate) vocab_size: usize,
    pub(crate) d_model: usize,
    pub(crate) n_layers: usize,
    pub(crate) n_heads: usize,
    pub(crate) ffn_dim: usize,
    pub(crate) eps: f32,
    pub(crate) max_positions: usize,
}

/// Buffers [`Encoder::embed`] reuses across calls (grown on demand).
#[derive(Default)]
pub struct EncoderScratch {
    pub(crate) forward: ForwardScratch,
    pub(crate) attention: SeqAttention,
}

enum Stack {
    Bert(Bert),
    Gemma(Gemma),
}

/// A loaded encoder; stateless, so one instance serves any number of batches (not at once:
/// `embed` takes `&mut` scratch through its caller).
pub struct Encoder {
    config: EncoderConfig,
    weights: Weights,
    stack: Stack,
    dense: Vec<Linear>,
    head: Option<Classifier>,
}

pub(crate) fn key_usize(file: &GgufFile, key: &str) -> Result<usize, ModelError> {
    file.get_usize(key)?
        .ok_or_else(|| ModelError::MissingKey(key.to_owned()))
}

impl Encoder {
    /// Loads a `bert` or `gemma-embedding` file with pagoda-hf's `pagoda.embedding.*` keys and
    /// `dense.{i}` tensors (what it converts a sentence-transformers directory into).
    pub fn load(file: Arc<GgufFile>) -> Result<Self, ModelError> {
        let arch = file
            .get_str("general.architecture")?
            .unwrap_or_default()
            .to_owned();
        let weights = Weights::new(Arc::clone(&file)).with_float_panels();
        let stack = match arch.as_str() {
            "bert" => Stack::Bert(Bert::load(&weights)?),
            "gemma-embedding" => Stack::Gemma(Gemma::load(&weights)?),
            _ => return Err(ModelError::UnsupportedArchitecture(arch)),
        };
        let shape = match &stack {
            Stack::Bert(b) => b.shape(),
            Stack::Gemma(g) => g.shape(),
        }
        .clone();
        let pooling =
            Pooling::from_gguf(file.get_u32(&format!("{arch}.pooling_type"))?.unwrap_or(1))?;
        let normalize = file
            .get_bool("pagoda.embedding.normalize")?
            .unwrap_or(false);
        let max_seq_len = file
            .get_usize("pagoda.embedding.max_seq_length")?
            .unwrap_or(shape.max_positions)
            .min(shape.max_positions);
        let head = match (&stack, pooling) {
            (Stack::Bert(_), Pooling::Rank) => Some(Classifier::load(&weights, shape.d_model)?),
            (_, Pooling::Rank) => {
                return Err(ModelError::BadKey {
                    key: format!("{arch}.pooling_type"),
                    reason: "rank pooling (a classifier head) is read for BERT only".into(),
                });
            }
            _ => None,
        };
        let n_dense = file.get_usize("pagoda.embedding.dense_count")?.unwrap_or(0);
        let mut dense = Vec::with_capacity(n_dense);
        let mut dim = shape.d_model;
        for i in 0..n_dense {
            let name = format!("dense.{i}.weight");
            let t = file
                .tensor(&name)
                .ok_or_else(|| ModelError::MissingTensor(name.clone()))?;
            let rows = t.dims.get(1).copied().unwrap_or(0) as usize;
            let bias = weights.has(&format!("dense.{i}.bias"));
            dense.push(weights.packed(weights.linear(&format!("dense.{i}"), rows, dim, bias)?));
            dim = rows;
        }
        if let Some(h) = &head {
            dim = h.labels();
        }
        let key = "pagoda.embedding.matryoshka_dimensions";
        let matryoshka_dimensions = match file.get_array(key)? {
            None => Vec::new(),
            Some(MetaArray::U32(v)) => v.iter().map(|&d| d as usize).collect(),
            Some(_) => {
                return Err(ModelError::BadKey {
                    key: key.into(),
                    reason: "not an array of u32".into(),
                });
            }
        };
        if let Some(&bad) = matryoshka_dimensions.iter().find(|&&m| m == 0 || m > dim) {
            return Err(ModelError::BadKey {
                key: key.into(),
                reason: format!("{bad} is not a length from 1 to the output's {dim}"),
            });
        }
        let names = file.get_str_array("pagoda.embedding.prompt_names")?;
        let texts = file.get_str_array("pagoda.embedding.prompts")?;
        let prompts: Vec<(String, String)> = match (names, texts) {
            (None, None) => Vec::new(),
            (Some(n), Some(t)) if n.len() == t.len() => {
                n.iter().cloned().zip(t.iter().cloned()).collect()
            }
            _ => {
                return Err(ModelError::BadKey {
                    key: "pagoda.embedding.prompts".into(),
                    reason: "not one text for each of pagoda.embedding.prompt_names".into(),
                });
            }
        };
        let default_prompt_name = file
            .get_str("pagoda.embedding.default_prompt_name")?
            .map(str::to_owned);
        if let Some(name) = &default_prompt_name
            && !prompts.iter().any(|(n, _)| n == name)
        {
            return Err(ModelError::BadKey {
                key: "pagoda.embedding.default_prompt_name".into(),
                reason: format!("{name:?} is not one of the prompts"),
            });
        }
        let prompt_in_pooling = file
            .get_bool("pagoda.embedding.pooling_include_prompt")?
            .unwrap_or(true);
        Ok(Self {
            config: EncoderConfig {
                vocab_size: shape.vocab_size,
                d_model: shape.d_model,
                n_layers: shape.n_layers,
                n_heads: shape.n_heads,
                ffn_dim: shape.ffn_dim,
                eps: shape.eps,
                max_positions: shape.max_positions,
                max_seq_len,
                pooling,
                normalize,
                output_dim: dim,
                cross_encoder: head.is_some(),
                matryoshka_dimensions,
                prompts,
                default_prompt_name,
                prompt_in_pooling,
            },
            weights,
            stack,
            dense,
            head,
        })
    }

    pub fn config(&self) -> &EncoderConfig {
        &self.config
    }

    /// One embedding per sequence, all sequences in one forward pass, L2-normalised when the
    /// model says so. Each sequence must be non-empty, at most `max_seq_len` tokens, of ids in
    /// the vocabulary.
    pub fn embed(
        &self,
        seqs: &[&[u32]],
        scratch: &mut EncoderScratch,
    ) -> Result<Vec<Vec<f32>>, ModelError> {
        let mut out = self.embed_unnormalized(seqs, scratch)?;
        if self.config.normalize {
            out.iter_mut().for_each(|v| l2_normalize(v));
        }
        Ok(out)
    }

    /// [`Encoder::embed`] before the final normalisation, for a caller that chooses it per
    /// request (TEI's `normalize`).
    pub fn embed_unnormalized(
        &self,
        seqs: &[&[u32]],
        scratch: &mut EncoderScratch,
    ) -> Result<Vec<Vec<f32>>, ModelError> {
        let lens: Vec<usize> = seqs.iter().map(|s| s.len()).collect();
        self.embed_segments(seqs, &lens, scratch)
    }

    /// [`Encoder::embed_unnormalized`] of sequences of two segments: the tokens of `seqs[i]`
    /// from `second[i]` on are of token type 1 (a pair's second text; `len`: none). A
    /// cross-encoder's output is each pair's logits.
    pub fn embed_segments(
        &self,
        seqs: &[&[u32]],
        second: &[usize],
        scratch: &mut EncoderScratch,
    ) -> Result<Vec<Vec<f32>>, ModelError> {
        let c = &self.config;
        if second.len() != seqs.len() {
            return Err(ModelError::InvalidBatch(format!(
                "{} segment starts for {} sequences",
                second.len(),
                seqs.len()
            )));
        }
        let types = match &self.stack {
            Stack::Bert(b) => b.token_type_count(),
            Stack::Gemma(_) => 0,
        };
        if let Some(i) = (0..seqs.len()).find(|&i| second[i] < seqs[i].len())
            && types < 2
        {
            return Err(ModelError::InvalidBatch(format!(
                "sequence {i} has a second segment; this model has no token type 1"
            )));
        }
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
        if seqs.is_empty() {
            return Ok(Vec::new());
        }
        let w = &self.weights;
        let x = match &self.stack {
            Stack::Bert(b) => b.forward(w, seqs, second, scratch),
            Stack::Gemma(g) => g.forward(w, seqs, scratch),
        };
        // Pooled rows `[S][d]`, then each Dense over all of them at once (or the head).
        let d = c.d_model;
        let mut pooled = vec![0f32; seqs.len() * d];
        let mut start = 0;
        for (s, row) in seqs.iter().zip(pooled.chunks_exact_mut(d)) {
            c.pooling.pool(&x[start * d..(start + s.len()) * d], d, row);
            start += s.len();
        }
        if let Some(h) = &self.head {
            let logits = h.logits(w, &pooled, seqs.len(), &mut scratch.forward);
            return Ok(logits
                .chunks_exact(h.labels())
                .map(<[f32]>::to_vec)
                .collect());
        }
        let (n, mut dim) = (seqs.len(), d);
        for l in &self.dense {
            let mut y = vec![0f32; n * l.weight.rows];
            w.forward(l, &pooled, n, &mut y, &mut scratch.forward.matmul);
            (pooled, dim) = (y, l.weight.rows);
        }
        Ok(pooled.chunks_exact(dim).map(<[f32]>::to_vec).collect())
    }
}
