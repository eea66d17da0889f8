//! The draft-model proposer: a second, smaller model of the same vocabulary, with its own KV
//! arena and block tables (private to it: the scheduler never sees them), run K steps
//! autoregressively for every speculating sequence of a step together. It remembers the tokens
//! it has KV for, so after a verification it resumes from the longest prefix that still
//! matches (accepted proposals keep their KV; rejected ones are overwritten), and it catches
//! up lazily: a sequence that starts speculating mid-generation first feeds what it missed,
//! in chunks, so one long prompt never stalls a step. For a greedy request a proposal is the
//! draft's argmax (one-hot); for a sampled one it is a draw from the draft's own distribution q
//! under the request's temperature, top-k, min-p and top-p, and q travels with it so that the
//! verification can apply the rejection rule (accept with min(1, p/q)). Its output head keeps
//! the vocabulary's first [`DRAFT_HEAD_ROWS`] ids (its frequent ones), a sixth of its step.

use std::collections::HashMap;
use std::time::Instant;

use pagoda_core::{DraftWork, SamplingParams};
use pagoda_speculative::{ProposeRequest, Proposer};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::runner::batch::{Logits, SeqChunk};
use crate::runner::calibration::time_steps;
use crate::sampler::{argmax, draw_from, processed_probs};
use crate::{CpuExecutor, ForwardBatch, Model, ModelError};

/// Rows of the vocabulary the draft's output head keeps (`Model::keep_head_rows`): the draft
/// proposes only ids below it. On Qwen2.5-Coder-0.5B drafting for the 1.5B on general chat
/// (docs/benchmarks.md), 65,536 rows keep 96% of the whole head's acceptance (63.4% against
/// 66.2% at K = 1) and cut the draft's step by ~18% (its head is 145 of the 392 MB it reads a
/// token); 32,768 rows cut a little more but lose 8% of the acceptance.
pub const DRAFT_HEAD_ROWS: usize = 65_536;

/// Most tokens one sequence catches up in a step before it may propose.
const CATCH_UP_CHUNK: usize = 256;

/// Mixed into a request's seed for the draft's own stream: the draft's draws must be
/// independent of the verifier's uniforms, which come from the request's seed itself.
const DRAFT_STREAM: u64 = 0x9e37_79b9_7f4a_7c15;

struct DraftSeq {
    /// The tokens whose KV the draft's arena holds for this sequence, by position.
    fed: Vec<u32>,
    table: Vec<u32>,
    /// The draft's random stream for a sampled request, seeded on its first draw.
    rng: Option<ChaCha8Rng>,
}

/// Proposes with a draft model.
pub struct DraftProposer {
    exec: CpuExecutor,
    free: Vec<u32>,
    seqs: HashMap<u64, DraftSeq>,
    work: Option<DraftWork>,
    /// Tokens held by each sequence fed in the last `propose`.
    fed: Vec<(u64, usize)>,
}

impl DraftProposer {
    /// A proposer running `model` (its output head cut to [`DRAFT_HEAD_ROWS`]) over an arena
    /// of `num_blocks` blocks of `block_size`.
    pub fn new(mut model: Model, num_blocks: usize, block_size: usize) -> Result<Self, ModelError> {
        model.keep_head_rows(DRAFT_HEAD_ROWS)?;
        let exec = CpuExecutor::new(model, num_blocks, block_size)?;
        Ok(Self {
            exec,
            free: (0..num_blocks as u32).rev().collect(),
            seqs: HashMap::new(),
            work: None,
            fed: Vec::new(),
        })
    }

    /// Refuses a draft whose vocabulary is not the target's, token for token: its ids would
    /// mean other text, and every proposal would be a wasted verification.
    pub fn check_vocabulary(target: &Model, draft: &Model) -> Result<(), String> {
        let key = "tokenizer.ggml.tokens";
        let tokens = |m: &Model| {
            m.gguf()
                .get_str_array(key)
                .ok()
                .flatten()
                .map(<[String]>::len)
        };
        let (t, d) = (target.gguf(), draft.gguf());
        let (tt, dt) = (
            t.get_str_array(key).ok().flatten(),
            d.get_str_array(key).ok().flatten(),
        );
        if target.config().vocab_size != draft.config().vocab_size || tt != dt {
            let first_diff = match (tt, dt) {
                (Some(a), Some(b)) => a
                    .iter()
                    .zip(b)
                    .position(|(x, y)| x != y)
                    .map(|i| {
                        format!(
                            "; token {i} is {:?} in the target, {:?} in the draft",
                            a[i], b[i]
                        )
                    })
                    .unwrap_or_default(),
                _ => String::new(),
            };
            return Err(format!(
                "the draft model's vocabulary differs from the target's ({} tokens, {} embedding \
                 rows in the target; {} tokens, {} rows in the draft{first_diff})",
                tokens(target).unwrap_or(0),
                target.config().vocab_size,
                tokens(draft).unwrap_or(0),
                draft.config().vocab_size,
            ));
        }
        Ok(())
    }

    /// What the last `propose` cost.
    pub fn take_work(&mut self) -> Option<DraftWork> {
        self.work.take()
    }

    /// The tokens the draft holds of each sequence it fed in the last `propose`: what the
    /// scheduler prices a lagging sequence's catch-up from.
    pub fn take_fed(&mut self) -> Vec<(u64, usize)> {
        std::mem::take(&mut self.fed)
    }

    /// Seconds of one draft forward against the sequences in it, for the cost model.
    pub fn calibrate(&mut self) -> Vec<(usize, f64)> {
        time_steps(&mut self.exec, &[1, 4, 16])
    }

    /// Grows `seq`'s table to hold `positions` tokens; false (nothing taken) when short.
    fn reserve(&mut self, seq: u64, positions: usize) -> bool {
        let bs = self.exec.kv_cache.block_size();
        let Some(st) = self.seqs.get_mut(&seq) else {
            return false;
        };
        let need = positions.div_ceil(bs).saturating_sub(st.table.len());
        if need > self.free.len() {
            return false;
        }
        let at = self.free.len() - need;
        st.table.extend(self.free.drain(at..));
        true
    }
}

/// One sequence's drafting this step.
struct Job {
    seq: u64,
    /// Tokens to feed first (what the draft has not seen), at positions `start..`.
    feed: Vec<u32>,
    start: usize,
    /// Proposals to make (0 while still catching up).
    k: usize,
    drafts: Vec<u32>,
    /// The distribution each draft was drawn from (sampled requests only).
    probs: Vec<Vec<f32>>,
    out: usize,
}

impl DraftProposer {
    /// Proposals as `Proposer::propose`, sampled where `sampling[i]` is a sampled request's
    /// parameters (argmax where it is `None` or greedy); `probs[i]` then holds the draft's
    /// distribution behind each of `out[i]`'s tokens (else it is empty).
    pub fn propose_sampled(
        &mut self,
        reqs: &[ProposeRequest<'_>],
        sampling: &[Option<&SamplingParams>],
        out: &mut Vec<Vec<u32>>,
        probs: &mut Vec<Vec<Vec<f32>>>,
    ) {
        out.clear();
        out.resize(reqs.len(), Vec::new());
        probs.clear();
        probs.resize(reqs.len(), Vec::new());
        let started = Instant::now();
        let mut jobs = Vec::new();
        for (i, r) in reqs.iter().enumerate() {
            let st = self.seqs.entry(r.seq_id).or_insert_with(|| DraftSeq {
                fed: Vec::new(),
                table: Vec::new(),
                rng: None,
            });
            let valid = st
                .fed
                .iter()
                .zip(r.tokens)
                .take_while(|(a, b)| a == b)
                .count();
            st.fed.truncate(valid);
            let lag = r.tokens.len() - valid;
            let (feed_len, k) = if lag > CATCH_UP_CHUNK {
                (CATCH_UP_CHUNK, 0)
            } else {
                (lag, r.max_tokens)
            };
            if feed_len == 0 {
                continue; // cannot happen: the newest token is never fed before it is verified
            }
            // KV for the fed tokens and for the proposals fed back (all but the last).
            let positions = valid + feed_len + k.saturating_sub(1);
            if !self.reserve(r.seq_id, positions) {
                continue; // the draft's arena is full: this sequence decodes without
            }
            jobs.push(Job {
                seq: r.seq_id,
                feed: r.tokens[valid..valid + feed_len].to_vec(),
                start: valid,
                k,
                drafts: Vec::new(),
                probs: Vec::new(),
                out: i,
            });
        }
        // Forwards in step with the target, and their seconds (see `DraftWork`).
        let (mut forwards, mut steady_secs) = (0, 0.0);
        let (mut catch_up_tokens, mut catch_up_secs) = (0, 0.0);
        let most = jobs.len();
        let kmax = jobs.iter().map(|j| j.k).max().unwrap_or(0);
        let jobs_empty = jobs.is_empty();
        let mut candidates = Vec::new();
        for round in 0..kmax.max(1) {
            let active: Vec<usize> = (0..jobs.len())
                .filter(|&j| {
                    if round == 0 {
                        !jobs[j].feed.is_empty()
                    } else {
                        jobs[j].drafts.len() == round && round < jobs[j].k
                    }
                })
                .collect();
            if active.is_empty() {
                break;
            }
            let t0 = Instant::now();
            let inputs: Vec<(Vec<u32>, usize)> = active
                .iter()
                .map(|&j| {
                    let job = &jobs[j];
                    if round == 0 {
                        (job.feed.clone(), job.start)
                    } else {
                        let pos = job.start + job.feed.len() + round - 1;
                        (vec![job.drafts[round - 1]], pos)
                    }
                })
                .collect();
            let steady = inputs.iter().all(|(t, _)| t.len() <= 2);
            let chunks: Vec<SeqChunk<'_>> = active
                .iter()
                .zip(&inputs)
                .map(|(&j, (tokens, start))| SeqChunk {
                    tokens,
                    start: *start,
                    block_tables: std::slice::from_ref(&self.seqs[&jobs[j].seq].table),
                    logits: Logits::Last,
                })
                .collect();
            let batch = ForwardBatch::from_seqs(&chunks, self.exec.kv_cache.block_size());
            drop(chunks);
            let vocab = self.exec.model.logits_width();
            let Ok(logits) = self.exec.forward(&batch) else {
                // A failed draft forward only costs the proposals.
                for j in &mut jobs {
                    j.drafts.clear();
                    j.probs.clear();
                    j.k = 0;
                }
                break;
            };
            for (row, &j) in active.iter().enumerate() {
                let job = &mut jobs[j];
                let Some(st) = self.seqs.get_mut(&job.seq) else {
                    continue;
                };
                st.fed.extend_from_slice(&inputs[row].0);
                if job.k == 0 {
                    continue;
                }
                let row = &logits[row * vocab..(row + 1) * vocab];
                match sampling.get(job.out).copied().flatten() {
                    Some(params) if !params.is_greedy() => {
                        let mut q = Vec::new();
                        processed_probs(params, row, &mut candidates, &mut q);
                        let seed = params.seed.unwrap_or(job.seq) ^ DRAFT_STREAM;
                        let rng = st
                            .rng
                            .get_or_insert_with(|| ChaCha8Rng::seed_from_u64(seed));
                        job.drafts.push(draw_from(&q, rng.random::<f64>()));
                        job.probs.push(q);
                    }
                    _ => job.drafts.push(argmax(row)),
                }
            }
            if steady {
                forwards += 1;
                steady_secs += t0.elapsed().as_secs_f64();
            } else {
                catch_up_tokens += inputs.iter().map(|(t, _)| t.len()).sum::<usize>();
                catch_up_secs += t0.elapsed().as_secs_f64();
            }
        }
        self.fed.clear();
        for job in jobs {
            if let Some(st) = self.seqs.get(&job.seq) {
                self.fed.push((job.seq, st.fed.len()));
            }
            out[job.out] = job.drafts;
            probs[job.out] = job.probs;
        }
        self.work = (!jobs_empty).then(|| DraftWork {
            forwards,
            seqs: most,
            seconds: steady_secs,
            total_seconds: started.elapsed().as_secs_f64(),
            catch_up_tokens,
            catch_up_seconds: catch_up_secs,
        });
    }
}

impl Proposer for DraftProposer {
    fn propose(&mut self, reqs: &[ProposeRequest<'_>], out: &mut Vec<Vec<u32>>) {
        self.propose_sampled(reqs, &[], out, &mut Vec::new());
    }

    fn finished(&mut self, seq_id: u64, _tokens: &[u32], _prompt_len: usize) {
        if let Some(st) = self.seqs.remove(&seq_id) {
            self.free.extend(st.table);
        }
    }
}
