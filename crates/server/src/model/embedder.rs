//! The embedding side of the server: an encoder model on its own thread, `pagoda-embedder`,
//! that batches every request waiting when it is free into one forward pass (an encoder keeps
//! no KV, so it needs none of the decoder engine's paging: only batching). Requests hand their
//! token sequences over a channel and await their vectors on a oneshot.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;

use pagoda_frontend::HfTokenizer;
use pagoda_model::{Encoder, EncoderScratch};
use tokio::sync::oneshot;

use crate::model::loader::LoadError;

/// Tokens one forward pass takes at most; more waiting requests go in the next pass (a single
/// request larger than this still runs, alone).
const PASS_TOKEN_BUDGET: usize = 16 * 1024;

struct Job {
    seqs: Vec<Vec<u32>>,
    reply: oneshot::Sender<Result<Vec<Vec<f32>>, String>>,
}

/// Counters of the batcher, read by `/metrics`.
#[derive(Default)]
pub struct EmbedderStats {
    /// Forward passes run.
    pub passes: AtomicU64,
    /// Sequences embedded.
    pub inputs: AtomicU64,
}

/// A loaded embedding model.
pub struct Embedder {
    tx: mpsc::Sender<Job>,
    pub tokenizer: HfTokenizer,
    /// Longest input, in tokens.
    pub max_seq_len: usize,
    /// Length of the vectors.
    pub dim: usize,
    /// Lengths `dimensions` may ask for (a Matryoshka model's); empty: `dimensions` is refused.
    pub matryoshka: Vec<usize>,
    /// Whether vectors are L2-normalised (and so re-normalised after truncation).
    pub normalize: bool,
    pub vocab_size: usize,
    pub stats: Arc<EmbedderStats>,
    /// The checkpoint directory, for `/v1/models` `root`.
    pub model_path: String,
}

impl Embedder {
    /// Converts the sentence-transformers checkpoint at `dir` and starts its thread.
    pub fn load(dir: &Path, quantization: pagoda_hf::Quantization) -> Result<Self, LoadError> {
        let open_err = |message: String| LoadError::Open {
            path: dir.display().to_string(),
            message,
        };
        let file = pagoda_hf::convert(dir, quantization).map_err(|e| open_err(e.to_string()))?;
        let encoder = Encoder::load(Arc::new(file)).map_err(|e| LoadError::Model(e.to_string()))?;
        let tokenizer = HfTokenizer::from_file(&dir.join("tokenizer.json"))
            .map_err(|e| LoadError::Tokenizer(e.to_string()))?;
        let c = encoder.config().clone();
        let stats = Arc::new(EmbedderStats::default());
        let (tx, rx) = mpsc::channel();
        let thread_stats = Arc::clone(&stats);
        std::thread::Builder::new()
            .name("pagoda-embedder".into())
            .spawn(move || run(encoder, rx, &thread_stats))?;
        Ok(Self {
            tx,
            tokenizer,
            max_seq_len: c.max_seq_len,
            dim: c.output_dim,
            matryoshka: c.matryoshka_dimensions,
            normalize: c.normalize,
            vocab_size: c.vocab_size,
            stats,
            model_path: dir.display().to_string(),
        })
    }

    /// The vectors of `seqs` (each checked by the caller against `max_seq_len` and the
    /// vocabulary), computed together with whatever other requests are waiting.
    pub async fn embed(&self, seqs: Vec<Vec<u32>>) -> Result<Vec<Vec<f32>>, String> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Job { seqs, reply })
            .map_err(|_| "the embedding thread has stopped".to_owned())?;
        rx.await
            .map_err(|_| "the embedding thread dropped the request".to_owned())?
    }
}

/// The batcher: waits for a job, takes every job already waiting (up to the token budget),
/// runs them as one forward pass and answers each.
fn run(encoder: Encoder, rx: mpsc::Receiver<Job>, stats: &EmbedderStats) {
    let mut scratch = EncoderScratch::default();
    let mut pending: Option<Job> = None;
    loop {
        let first = match pending.take() {
            Some(j) => j,
            None => match rx.recv() {
                Ok(j) => j,
                Err(_) => return, // the server dropped the embedder
            },
        };
        let mut tokens: usize = first.seqs.iter().map(Vec::len).sum();
        let mut jobs = vec![first];
        while let Ok(j) = rx.try_recv() {
            let t: usize = j.seqs.iter().map(Vec::len).sum();
            if tokens + t > PASS_TOKEN_BUDGET {
                pending = Some(j);
                break;
            }
            tokens += t;
            jobs.push(j);
        }
        let seqs: Vec<&[u32]> = jobs
            .iter()
            .flat_map(|j| j.seqs.iter().map(Vec::as_slice))
            .collect();
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            encoder.embed(&seqs, &mut scratch)
        }));
        stats.passes.fetch_add(1, Ordering::Relaxed);
        stats.inputs.fetch_add(seqs.len() as u64, Ordering::Relaxed);
        match result {
            Ok(Ok(mut vectors)) => {
                // Hand each job its own vectors, in order.
                let mut rest = vectors.drain(..);
                for j in jobs {
                    let mine: Vec<Vec<f32>> = rest.by_ref().take(j.seqs.len()).collect();
                    let _ = j.reply.send(Ok(mine));
                }
            }
            Ok(Err(e)) => jobs.into_iter().for_each(|j| {
                let _ = j.reply.send(Err(e.to_string()));
            }),
            Err(_) => jobs.into_iter().for_each(|j| {
                let _ = j.reply.send(Err("the encoder panicked".to_owned()));
            }),
        }
    }
}
