//! Scores of text pairs from the encoder's outputs, both kinds through the embedding batcher
//! (`embedder.rs`): a bi-encoder's are the cosine similarity of the two texts' embeddings (as
//! vLLM's score API does for embedding models); a cross-encoder's, the sigmoid of its one
//! logit for the pair (sentence-transformers' CrossEncoder default for one label, and vLLM's),
//! or the logit itself when asked (TEI's `raw_scores`).

use crate::model::embedder::{EmbedJob, Embedder};

/// A checked scoring request (`prepare/score_pairs.rs::check` makes it).
#[derive(Debug)]
pub enum ScoreJob {
    /// Embeddings (normalised) of the first texts, then of the second ones; pair `(i, j)` is
    /// first text `i` with second text `j`.
    Cosine {
        job: EmbedJob,
        firsts: usize,
        pairs: Vec<(usize, usize)>,
    },
    /// One token sequence per pair, its second text from `second[i]` on.
    Cross {
        seqs: Vec<Vec<u32>>,
        second: Vec<usize>,
    },
}

impl ScoreJob {
    /// Tokens the model runs over, for usage.
    pub fn tokens(&self) -> usize {
        match self {
            Self::Cosine { job, .. } => job.tokens(),
            Self::Cross { seqs, .. } => seqs.iter().map(Vec::len).sum(),
        }
    }
}

/// One score per pair, in pair order; `raw`: a cross-encoder's logits without the sigmoid.
pub async fn scores(e: &Embedder, job: ScoreJob, raw: bool) -> Result<Vec<f32>, String> {
    match job {
        ScoreJob::Cosine { job, firsts, pairs } => {
            let vectors = e.vectors(job).await?;
            let (a, b) = vectors.split_at(firsts.min(vectors.len()));
            pairs
                .iter()
                .map(|&(i, j)| match (a.get(i), b.get(j)) {
                    (Some(x), Some(y)) => Ok(cosine(x, y)),
                    _ => Err(format!("pair ({i}, {j}) has no embedding")),
                })
                .collect()
        }
        ScoreJob::Cross { seqs, second } => {
            let logits = e.pair_logits(seqs, second).await?;
            logits
                .iter()
                .map(|l| match l.first() {
                    Some(&x) if raw => Ok(x),
                    Some(&x) => Ok(sigmoid(x)),
                    None => Err("the cross-encoder gave no logit".to_owned()),
                })
                .collect()
        }
    }
}

/// `a·b / (|a| |b|)` (the embeddings come normalised; dividing keeps it exact for any).
fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let (mut ab, mut aa, mut bb) = (0f64, 0f64, 0f64);
    for (&x, &y) in a.iter().zip(b) {
        ab += x as f64 * y as f64;
        aa += x as f64 * x as f64;
        bb += y as f64 * y as f64;
    }
    (ab / (aa.sqrt() * bb.sqrt()).max(1e-12)) as f32
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cosine_and_sigmoid() {
        assert!((cosine(&[1.0, 0.0], &[1.0, 1.0]) - 0.70710677).abs() < 1e-6);
        assert_eq!(cosine(&[0.0, 0.0], &[1.0, 1.0]), 0.0);
        assert_eq!(sigmoid(0.0), 0.5);
        assert!((sigmoid(2.0) - 0.880797).abs() < 1e-6);
    }
}
