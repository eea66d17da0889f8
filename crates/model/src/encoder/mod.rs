//! Encoders for embeddings: a BERT stack (bidirectional attention, post-norm LayerNorm, erf
//! GELU, absolute positions) and sentence-transformers' pooling, Dense projections and L2
//! normalisation. An encoder keeps no KV cache: `embed` runs whole sequences, every linear
//! layer once over all of their tokens, attention per sequence.

mod bert;
mod pooling;

pub use bert::{Encoder, EncoderConfig};
/// The matmul scratch [`Encoder::embed`] reuses across calls.
pub use pagoda_kernels::matmul::MatmulScratch;
pub use pooling::Pooling;
