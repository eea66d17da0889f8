//! How a sequence's token states become one vector (sentence-transformers' Pooling module;
//! llama.cpp's `pooling_type` values), and L2 normalisation.

use crate::ModelError;

/// Which token states a sequence's embedding is made of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pooling {
    /// The mean over every token (the attention mask is all ones: no padding is computed).
    Mean,
    /// The first token ([CLS]).
    Cls,
    /// The last token.
    Last,
    /// The first token ([CLS]) into a cross-encoder's classifier head (llama.cpp's RANK).
    Rank,
}

impl Pooling {
    /// From llama.cpp's `{arch}.pooling_type` (1 mean, 2 cls, 3 last, 4 rank).
    pub fn from_gguf(v: u32) -> Result<Self, ModelError> {
        Ok(match v {
            1 => Self::Mean,
            2 => Self::Cls,
            3 => Self::Last,
            4 => Self::Rank,
            other => {
                return Err(ModelError::BadKey {
                    key: "pooling_type".into(),
                    reason: format!("{other} (pagoda pools by mean 1, cls 2, last 3, rank 4)"),
                });
            }
        })
    }

    /// Pools `states` (`n` rows of `dim`) into `out`.
    pub fn pool(self, states: &[f32], dim: usize, out: &mut [f32]) {
        let n = states.len() / dim;
        match self {
            Self::Mean => {
                out.fill(0.0);
                let mut acc = vec![0f64; dim];
                for row in states.chunks_exact(dim) {
                    for (a, &v) in acc.iter_mut().zip(row) {
                        *a += v as f64;
                    }
                }
                for (o, a) in out.iter_mut().zip(acc) {
                    *o = (a / n as f64) as f32;
                }
            }
            Self::Cls | Self::Rank => out.copy_from_slice(&states[..dim]),
            Self::Last => out.copy_from_slice(&states[(n - 1) * dim..]),
        }
    }
}

/// `v / max(|v|, 1e-12)`, as torch.nn.functional.normalize.
pub fn l2_normalize(v: &mut [f32]) {
    let norm = v
        .iter()
        .map(|&x| x as f64 * x as f64)
        .sum::<f64>()
        .sqrt()
        .max(1e-12);
    for x in v {
        *x = (*x as f64 / norm) as f32;
    }
}

/// A Matryoshka model's vector cut to its first `dim` values, re-normalised when the model's
/// vectors are (sentence-transformers' `truncate_dim` then Normalize).
pub fn truncate_normalized(v: &mut Vec<f32>, dim: usize, normalize: bool) {
    v.truncate(dim);
    if normalize {
        l2_normalize(v);
    }
}
