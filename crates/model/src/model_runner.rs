//! `ModelRunner`: the executor side of the engine. It keeps each sequence's tokens, block
//! table and sampler across steps (the scheduler sends only diffs), turns a `SchedulerOutput`
//! into one flat `ForwardBatch`, runs it, and samples where a sequence reached its last known
//! token, so logits never leave the executor. A sequence with a structured-output constraint
//! (compiled once at the edge) starts its grammar state in its sampler when first scheduled.

use std::collections::HashMap;
use std::sync::Mutex;

use pagoda_core::{
    ConstraintError, ExecutorError, ExecutorOutput, ModelExecutor, SampledToken, SchedulerOutput,
    SeqId,
};

use crate::batch::{Logits, SeqChunk};
use crate::sampler::{Sampled, Sampler, prompt_logprobs};
use crate::{CpuExecutor, ForwardBatch};

struct SeqState {
    /// Prompt, then every token sampled so far.
    tokens: Vec<u32>,
    prompt_len: usize,
    block_table: Vec<u32>,
    sampler: Sampler,
    prompt_logprobs: Option<u32>,
    /// Why this sequence cannot run (reported once, then it is never batched).
    failed: Option<String>,
}

/// Where one sequence's rows landed in the step's logits.
struct RowPlan {
    seq_id: SeqId,
    /// First logits row of this sequence.
    first_row: usize,
    /// Prompt-logprob rows (positions `pl_start..pl_start + pl_rows`).
    pl_start: usize,
    pl_rows: usize,
    /// Tokens scheduled for this sequence in this step.
    num_rows: usize,
    /// Whether the last row samples a token.
    samples: bool,
}

/// Runs scheduled steps on a `CpuExecutor`.
pub struct ModelRunner {
    exec: CpuExecutor,
    seqs: HashMap<SeqId, SeqState>,
    eog_ids: Vec<u32>,
}

impl ModelRunner {
    pub fn new(exec: CpuExecutor) -> Self {
        let eog_ids = exec.model.config().eog_token_ids.clone();
        Self {
            exec,
            seqs: HashMap::new(),
            eog_ids,
        }
    }

    pub fn executor(&self) -> &CpuExecutor {
        &self.exec
    }

    /// Sequences whose state the runner holds.
    pub fn num_seqs(&self) -> usize {
        self.seqs.len()
    }

    fn apply_diff(&mut self, step: &SchedulerOutput) -> Result<(), ExecutorError> {
        for id in &step.finished_seq_ids {
            self.seqs.remove(id);
        }
        for s in &step.scheduled {
            if let Some(new) = &s.new {
                let mut params = new.params.clone();
                params.seed = Some(new.seed);
                let prompt_logprobs = params.prompt_logprobs;
                let constraint = params.constraint.clone();
                let mut sampler =
                    Sampler::with_context(params, new.seed, &new.prompt_token_ids, &self.eog_ids);
                if let Some(c) = constraint {
                    sampler = sampler.with_constraint(c.start());
                }
                self.seqs.insert(
                    s.seq_id,
                    SeqState {
                        tokens: new.prompt_token_ids.clone(),
                        prompt_len: new.prompt_token_ids.len(),
                        block_table: s.block_ids.clone(),
                        sampler,
                        prompt_logprobs,
                        failed: None,
                    },
                );
                continue;
            }
            let st = self.seqs.get_mut(&s.seq_id).ok_or_else(|| {
                ExecutorError(format!("sequence {} scheduled but unknown", s.seq_id))
            })?;
            if s.resumed {
                st.block_table.clone_from(&s.block_ids);
            } else {
                st.block_table.extend_from_slice(&s.block_ids);
            }
        }
        Ok(())
    }
}

impl ModelExecutor for ModelRunner {
    fn execute(&mut self, step: &SchedulerOutput) -> Result<ExecutorOutput, ExecutorError> {
        self.apply_diff(step)?;
        let mut out = ExecutorOutput::default();
        let block_size = self.exec.kv_cache.block_size();
        let mut chunks = Vec::with_capacity(step.scheduled.len());
        let mut plans = Vec::with_capacity(step.scheduled.len());
        let mut rows = 0;
        for s in &step.scheduled {
            let st = &self.seqs[&s.seq_id];
            if let Some(e) = &st.failed {
                // Ends it in the core before its results would be read; nothing to compute.
                out.failed.push((s.seq_id, e.clone()));
                continue;
            }
            let (start, end) = (
                s.num_computed_tokens,
                s.num_computed_tokens + s.num_scheduled_tokens,
            );
            if end > st.tokens.len() || start >= end {
                return Err(ExecutorError(format!(
                    "sequence {} scheduled tokens {start}..{end} but has {}",
                    s.seq_id,
                    st.tokens.len()
                )));
            }
            let samples = end == st.tokens.len();
            // Row i of the chunk scores the token at position start + i + 1.
            let pl_end = end.min(st.prompt_len.saturating_sub(1));
            let pl_rows = match st.prompt_logprobs {
                Some(_) if start < pl_end => pl_end - start,
                _ => 0,
            };
            let logits = if pl_rows > 0 {
                Logits::All
            } else if samples {
                Logits::Last
            } else {
                Logits::None
            };
            plans.push(RowPlan {
                seq_id: s.seq_id,
                first_row: rows,
                pl_start: start,
                pl_rows,
                num_rows: end - start,
                samples,
            });
            rows += match logits {
                Logits::All => end - start,
                Logits::Last => 1,
                Logits::None => 0,
            };
            chunks.push(SeqChunk {
                tokens: &st.tokens[start..end],
                start,
                block_table: &st.block_table,
                logits,
            });
        }
        if chunks.is_empty() {
            return Ok(out);
        }
        let batch = ForwardBatch::from_seqs(&chunks, block_size);
        drop(chunks);
        let vocab = self.exec.vocab_size();
        let logits = self
            .exec
            .forward(&batch)
            .map_err(|e| ExecutorError(e.to_string()))?;
        let mut sampled = sample_rows(&mut self.seqs, &plans, logits, vocab);
        for (p, sampled) in plans.iter().zip(&mut sampled) {
            let Some(st) = self.seqs.get_mut(&p.seq_id) else {
                continue;
            };
            if p.pl_rows > 0 {
                let k = st.prompt_logprobs.unwrap_or(0) as usize;
                let rows = &logits[p.first_row * vocab..(p.first_row + p.pl_rows) * vocab];
                let targets = &st.tokens[p.pl_start + 1..p.pl_start + 1 + p.pl_rows];
                out.prompt_logprobs
                    .push((p.seq_id, prompt_logprobs(rows, vocab, targets, k)));
            }
            match sampled.take() {
                None => {}
                Some(Err(e)) => {
                    st.failed = Some(e.to_string());
                    out.failed.push((p.seq_id, e.to_string()));
                }
                Some(Ok(sampled)) => {
                    st.tokens.push(sampled.token_id);
                    out.sampled.push(SampledToken {
                        seq_id: p.seq_id,
                        token_id: sampled.token_id,
                        logprobs: sampled.position_logprobs(),
                    });
                }
            }
        }
        Ok(out)
    }
}

/// One sequence's sampling job of a step: its sampler, its row, and where the result goes.
struct SampleJob<'a> {
    sampler: &'a mut Sampler,
    row: &'a [f32],
    result: Option<Result<Sampled, ConstraintError>>,
}

/// Samples every plan that samples, one result per plan (`None` where it does not). Each
/// sequence's sampler is independent and deterministic, so the rows are spread over the
/// kernel pool: at 32 streams and a 262k vocabulary one core would spend milliseconds here
/// while the other idles. Results do not depend on which thread ran a job.
fn sample_rows(
    seqs: &mut HashMap<SeqId, SeqState>,
    plans: &[RowPlan],
    logits: &[f32],
    vocab: usize,
) -> Vec<Option<Result<Sampled, ConstraintError>>> {
    // Plan index of each sampling sequence, to hand out one `&mut Sampler` per sequence.
    let slot: HashMap<SeqId, usize> = plans
        .iter()
        .enumerate()
        .filter(|(_, p)| p.samples)
        .map(|(i, p)| (p.seq_id, i))
        .collect();
    let mut jobs: Vec<(usize, Mutex<SampleJob<'_>>)> = Vec::with_capacity(slot.len());
    for (id, st) in seqs.iter_mut() {
        let Some(&i) = slot.get(id) else {
            continue;
        };
        let p = &plans[i];
        // With prompt logprobs every row came back; otherwise only the last one.
        let last = if p.pl_rows > 0 {
            p.first_row + p.num_rows - 1
        } else {
            p.first_row
        };
        let job = SampleJob {
            sampler: &mut st.sampler,
            row: &logits[last * vocab..(last + 1) * vocab],
            result: None,
        };
        jobs.push((i, Mutex::new(job)));
    }
    // The lock is uncontended: job `t` is only ever touched by the task `t`.
    pagoda_kernels::parallel::run(jobs.len(), &|t| {
        if let Ok(mut job) = jobs[t].1.lock() {
            let job = &mut *job;
            job.result = Some(job.sampler.sample(job.row));
        }
    });
    let mut results: Vec<_> = plans.iter().map(|_| None).collect();
    for (i, job) in jobs {
        results[i] = job.into_inner().ok().and_then(|j| j.result);
    }
    results
}
