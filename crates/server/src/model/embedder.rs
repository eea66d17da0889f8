//! The embedding side of the server: an encoder model on its own thread, `pagoda-embedder`,
//! that packs the inputs of every waiting request into forward passes (steps) under a token
//! budget (an encoder keeps no KV, so it needs none of the decoder engine's paging: only
//! batching; `embed_steps.rs` picks each step's inputs). Requests hand their token sequences
//! over a channel and await their vectors on a oneshot.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;

use pagoda_core::engine::StepTurns;
use pagoda_frontend::HfTokenizer;
use pagoda_model::encoder::{l2_normalize, truncate_normalized};
use pagoda_model::{Encoder, EncoderScratch};
use tokio::sync::oneshot;

use crate::model::embed_steps::{Waiting, plan};
use crate::model::loader::LoadError;

/// `--max-batch-tokens`' default: enough rows for the encoder's products to run at full speed
/// (they reach it from a few hundred), few enough that a step of long documents takes well
/// under a second for MiniLM on two cores, the most a query can wait for a step to end.
pub const DEFAULT_MAX_BATCH_TOKENS: usize = 2048;

/// A checked embedding request (`prepare/embed.rs::check` makes it): the token sequences the
/// batcher runs and how its vectors are shaped.
#[derive(Debug)]
pub struct EmbedJob {
    pub seqs: Vec<Vec<u32>>,
    /// Cut each vector to this length (a Matryoshka length of the model).
    pub dimensions: Option<usize>,
    /// L2-normalise each vector (after the cut).
    pub normalize: bool,
}

impl EmbedJob {
    /// Tokens of all inputs, for usage.
    pub fn tokens(&self) -> usize {
        self.seqs.iter().map(Vec::len).sum()
    }
}

struct Job {
    seqs: Vec<Vec<u32>>,
    /// Where each sequence's second segment (token type 1) starts: its length when it has none.
    second: Vec<usize>,
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
    /// Whether the model's vectors are L2-normalised (its Normalize module): the default of a
    /// request that does not say.
    pub normalize: bool,
    /// sentence-transformers' prompts (name, text), the default one's name, and whether they
    /// may be used (`EncoderConfig::prompt_in_pooling`).
    pub prompts: Vec<(String, String)>,
    pub default_prompt_name: Option<String>,
    pub prompt_in_pooling: bool,
    pub vocab_size: usize,
    /// A cross-encoder: it scores pairs of texts (`pair_logits`) and has no embeddings.
    pub cross_encoder: bool,
    pub stats: Arc<EmbedderStats>,
    /// The checkpoint directory, for `/v1/models` `root`.
    pub model_path: String,
}

impl Embedder {
    /// Converts the sentence-transformers checkpoint at `dir` and starts its thread, which
    /// runs at most `max_batch_tokens` tokens a step (one longer input runs alone).
    pub fn load(
        dir: &Path,
        quantization: pagoda_hf::Quantization,
        max_batch_tokens: usize,
        turns: Arc<StepTurns>,
    ) -> Result<Self, LoadError> {
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
            .spawn(move || run(encoder, rx, &thread_stats, max_batch_tokens.max(1), &turns))?;
        Ok(Self {
            tx,
            tokenizer,
            max_seq_len: c.max_seq_len,
            dim: c.output_dim,
            matryoshka: c.matryoshka_dimensions,
            normalize: c.normalize,
            prompts: c.prompts,
            default_prompt_name: c.default_prompt_name,
            prompt_in_pooling: c.prompt_in_pooling,
            vocab_size: c.vocab_size,
            cross_encoder: c.cross_encoder,
            stats,
            model_path: dir.display().to_string(),
        })
    }

    /// The vectors of a checked request, cut to its `dimensions` and normalised as it asks.
    pub async fn vectors(&self, job: EmbedJob) -> Result<Vec<Vec<f32>>, String> {
        let second = job.seqs.iter().map(Vec::len).collect();
        let mut vectors = self.embed(job.seqs, second).await?;
        for v in &mut vectors {
            match job.dimensions {
                Some(d) => truncate_normalized(v, d, job.normalize),
                None if job.normalize => l2_normalize(v),
                None => {}
            }
        }
        Ok(vectors)
    }

    /// A cross-encoder's logits of pairs: `seqs[i]` is a pair's tokens, its second text from
    /// `second[i]` on (`prepare/score_pairs.rs` checks them).
    pub async fn pair_logits(
        &self,
        seqs: Vec<Vec<u32>>,
        second: Vec<usize>,
    ) -> Result<Vec<Vec<f32>>, String> {
        self.embed(seqs, second).await
    }

    /// The unnormalised vectors of `seqs` (each checked against `max_seq_len` and the
    /// vocabulary), computed in steps shared with whatever other requests are waiting.
    async fn embed(
        &self,
        seqs: Vec<Vec<u32>>,
        second: Vec<usize>,
    ) -> Result<Vec<Vec<f32>>, String> {
        if seqs.is_empty() {
            return Ok(Vec::new());
        }
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Job {
                seqs,
                second,
                reply,
            })
            .map_err(|_| "the embedding thread has stopped".to_owned())?;
        rx.await
            .map_err(|_| "the embedding thread dropped the request".to_owned())?
    }
}

/// A request being embedded: its vectors so far and where it stands.
struct Active {
    job: Job,
    lens: Vec<usize>,
    /// The vectors so far: as many as inputs ran, so its length is the next input's index.
    done: Vec<Vec<f32>>,
    passed_over: bool,
}

impl Active {
    fn new(job: Job) -> Self {
        Self {
            lens: job.seqs.iter().map(Vec::len).collect(),
            done: Vec::with_capacity(job.seqs.len()),
            job,
            passed_over: false,
        }
    }
}

/// The batcher: waits for a request, then runs steps until none is left, taking the requests
/// that arrived in between into each next step's plan.
fn run(
    encoder: Encoder,
    rx: mpsc::Receiver<Job>,
    stats: &EmbedderStats,
    budget: usize,
    turns: &StepTurns,
) {
    let mut scratch = EncoderScratch::default();
    let mut active: Vec<Active> = Vec::new();
    loop {
        if active.is_empty() {
            match rx.recv() {
                Ok(j) => active.push(Active::new(j)),
                Err(_) => return, // the server dropped the embedder
            }
        }
        while let Ok(j) = rx.try_recv() {
            active.push(Active::new(j));
        }
        // A client that went away needs no more steps.
        active.retain(|a| !a.job.reply.is_closed());
        if active.is_empty() {
            continue;
        }
        let waiting: Vec<Waiting> = active
            .iter()
            .map(|a| Waiting {
                lens: &a.lens[a.done.len()..],
                passed_over: a.passed_over,
            })
            .collect();
        let take = plan(&waiting, budget);
        let seqs: Vec<&[u32]> = active
            .iter()
            .zip(&take)
            .flat_map(|(a, &n)| {
                let from = a.done.len();
                a.job.seqs[from..from + n].iter().map(Vec::as_slice)
            })
            .collect();
        let second: Vec<usize> = active
            .iter()
            .zip(&take)
            .flat_map(|(a, &n)| {
                let from = a.done.len();
                a.job.second[from..from + n].iter().copied()
            })
            .collect();
        // A pass takes its turn with the other models' steps (`StepTurns`).
        let turn = turns.take();
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            encoder.embed_segments(&seqs, &second, &mut scratch)
        }));
        drop(turn);
        stats.passes.fetch_add(1, Ordering::Relaxed);
        stats.inputs.fetch_add(seqs.len() as u64, Ordering::Relaxed);
        let failure = match result {
            Ok(Ok(vectors)) => {
                // Each request gets its own vectors, in order.
                let mut rest = vectors.into_iter();
                for (a, &n) in active.iter_mut().zip(&take) {
                    a.done.extend(rest.by_ref().take(n));
                    a.passed_over = n == 0;
                }
                None
            }
            Ok(Err(e)) => Some(e.to_string()),
            Err(_) => Some("the encoder panicked".to_owned()),
        };
        // Answer the requests that are complete, or whose inputs were in a failed step.
        let mut i = 0;
        let mut k = 0;
        while i < active.len() {
            let in_step = take[k] > 0;
            k += 1;
            let complete = active[i].done.len() == active[i].lens.len();
            if complete || (in_step && failure.is_some()) {
                let a = active.remove(i);
                let answer = match &failure {
                    Some(e) if in_step => Err(e.clone()),
                    _ => Ok(a.done),
                };
                let _ = a.job.reply.send(answer);
            } else {
                i += 1;
            }
        }
    }
}
