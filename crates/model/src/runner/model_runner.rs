//! `ModelRunner`: the executor side of the engine. It keeps each sequence's tokens, block
//! table and sampler across steps (the scheduler sends only diffs), turns a `SchedulerOutput`
//! into one flat `ForwardBatch`, runs it, and samples where a sequence reached its last known
//! token, so logits never leave the executor. A sequence with a structured-output constraint
//! (compiled once at the edge) starts its grammar state in its sampler when first scheduled.
//! With a proposer, a sequence given speculative slots gets up to K proposed tokens appended
//! to its chunk; its sampler then walks the K + 1 rows in order and keeps each proposal it
//! would itself have drawn, or, for a draft model's sampled proposals, each one the rejection
//! rule accepts, so every sampling feature holds exactly (see `sample_rows::verify`).

use std::collections::HashMap;
use std::sync::Arc;

use pagoda_core::{
    Calibration, ConstraintError, ExecutorError, ExecutorOutput, ModelExecutor, SampledToken,
    SchedulerOutput, SeqId,
};

use pagoda_speculative::{ProposeRequest, Proposer};

use super::batch::{Logits, SeqChunk};
use super::calibration::{CALIBRATION_TOKENS, time_steps};
use super::draft::DraftProposer;
use super::sample_rows::sample_rows;
use super::seq_state::{RowPlan, SeqState};
use crate::kv::transfer::KvSender;
use crate::lora::LoraAdapter;
use crate::sampler::{Sampled, Sampler, prompt_logprobs};
use crate::{CpuExecutor, ForwardBatch, ModelError, TierBytes};

/// Runs scheduled steps on a `CpuExecutor`.
pub struct ModelRunner {
    exec: CpuExecutor,
    seqs: HashMap<SeqId, SeqState>,
    eog_ids: Vec<u32>,
    proposer: Option<Proposing>,
    /// Reused proposal buffers: tokens, and a draft model's distributions behind them.
    proposals: Vec<Vec<u32>>,
    proposal_probs: Vec<Vec<Vec<f32>>>,
    /// The disk tier of the prefix cache: evicted blocks are copied to it, read ones from it.
    tier: Option<Arc<dyn TierBytes>>,
    /// Prefill role: ships finished requests' prompt blocks to decode replicas.
    sender: Option<Arc<KvSender>>,
}

impl ModelRunner {
    pub fn new(exec: CpuExecutor) -> Self {
        let eog_ids = exec.model.config().eog_token_ids.clone();
        Self {
            exec,
            seqs: HashMap::new(),
            eog_ids,
            proposer: None,
            proposals: Vec::new(),
            proposal_probs: Vec::new(),
            tier: None,
            sender: None,
        }
    }

    /// This runner, saving evicted blocks to `tier` and installing blocks read from it.
    pub fn with_kv_tier(mut self, tier: Arc<dyn TierBytes>) -> Self {
        self.tier = Some(tier);
        self
    }

    /// This runner, shipping the blocks of `SchedulerOutput::kv_sends` with `sender`.
    pub fn with_kv_sender(mut self, sender: Arc<KvSender>) -> Self {
        self.sender = Some(sender);
        self
    }

    /// Copies the step's outgoing transfers out of the arena (their blocks were released
    /// when the step was planned, so this runs before anything in the step writes).
    fn send_copies(&mut self, step: &SchedulerOutput) -> Result<(), ExecutorError> {
        let Some(sender) = &self.sender else {
            return Ok(());
        };
        for send in &step.kv_sends {
            let ids: Vec<u32> = send.blocks.iter().map(|&(b, _)| b).collect();
            let payloads = self.exec.read_blocks(&ids).map_err(executor_error)?;
            let blocks = send
                .blocks
                .iter()
                .map(|&(_, key)| key)
                .zip(payloads)
                .collect();
            sender.send(send.id.clone(), send.addr.clone(), blocks);
        }
        Ok(())
    }

    /// The step's tier copies: evicted blocks' bytes out first (the step may reuse their
    /// blocks), then blocks read back into theirs, all before any forward pass writes.
    fn tier_copies(&mut self, step: &SchedulerOutput) -> Result<(), ExecutorError> {
        let Some(tier) = &self.tier else {
            return Ok(());
        };
        if !step.kv_saves.is_empty() {
            let ids: Vec<u32> = step.kv_saves.iter().map(|&(b, _)| b).collect();
            let payloads = self.exec.read_blocks(&ids).map_err(executor_error)?;
            for (&(_, key), payload) in step.kv_saves.iter().zip(payloads) {
                tier.save(key, payload);
            }
        }
        let mut read: HashMap<u64, HashMap<pagoda_core::kv::BlockHash, Vec<u8>>> = HashMap::new();
        // Loads left of each (read, block): the last one takes the payload, any before it copy.
        let mut left: HashMap<(u64, pagoda_core::kv::BlockHash), usize> = HashMap::new();
        for load in &step.kv_loads {
            *left.entry((load.ticket, load.key)).or_default() += 1;
        }
        let mut writes = Vec::with_capacity(step.kv_loads.len());
        for load in &step.kv_loads {
            let blocks = read
                .entry(load.ticket)
                .or_insert_with(|| tier.take_read(load.ticket).into_iter().collect());
            let n = left.entry((load.ticket, load.key)).or_default();
            *n = n.saturating_sub(1);
            let payload = if *n == 0 {
                blocks.remove(&load.key)
            } else {
                blocks.get(&load.key).cloned()
            };
            // A block missing from its read is not written (an empty payload is refused).
            writes.push((load.block_id, payload.unwrap_or_default()));
        }
        if writes.is_empty() {
            return Ok(());
        }
        let ids: Vec<u32> = writes.iter().map(|w| w.0).collect();
        let written = self.exec.write_blocks(writes).map_err(executor_error)?;
        for (b, ok) in ids.into_iter().zip(written) {
            if !ok {
                // Not reached: the scheduler installs only blocks whose read finished intact.
                tracing::error!(block = b, "KV tier: a block read back is missing");
            }
        }
        Ok(())
    }

    /// This runner, proposing with `proposer` wherever the scheduler gives speculative slots.
    pub fn with_proposer(mut self, proposer: Box<dyn Proposer>) -> Self {
        self.proposer = Some(Proposing::Tokens(proposer));
        self
    }

    /// This runner, proposing with a draft model.
    pub fn with_draft_model(mut self, draft: DraftProposer) -> Self {
        self.proposer = Some(Proposing::Draft(Box::new(draft)));
        self
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
            if let Some(st) = self.seqs.remove(id)
                && let Some(p) = &mut self.proposer
            {
                p.get().finished(*id, &st.tokens, st.prompt_len);
            }
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
                let lora = new.params.lora.as_ref().map(|l| l.handle::<LoraAdapter>());
                let failed = match &lora {
                    Some(None) => {
                        Some("the request's adapter is not a LoRA adapter of this model".into())
                    }
                    _ => None,
                };
                self.seqs.insert(
                    s.seq_id,
                    SeqState {
                        tokens: new.prompt_token_ids.clone(),
                        prompt_len: new.prompt_token_ids.len(),
                        block_tables: s.block_ids.clone(),
                        sampler,
                        prompt_logprobs,
                        failed,
                        lora: lora.flatten(),
                    },
                );
                continue;
            }
            let st = self.seqs.get_mut(&s.seq_id).ok_or_else(|| {
                ExecutorError(format!("sequence {} scheduled but unknown", s.seq_id))
            })?;
            if let Some(shift) = &s.shift {
                let (keep, discard) = (shift.keep, shift.discard);
                if keep + discard > st.tokens.len() {
                    return Err(ExecutorError(format!(
                        "sequence {}: context shift of {keep}+{discard} past its {} tokens",
                        s.seq_id,
                        st.tokens.len()
                    )));
                }
                st.tokens.drain(keep..keep + discard);
                st.prompt_len -= st.prompt_len.saturating_sub(keep).min(discard);
                self.exec
                    .shift_kv(&shift.copies, discard as u32)
                    .map_err(executor_error)?;
            }
            if s.resumed {
                st.block_tables.clone_from(&s.block_ids);
            } else {
                for (table, ids) in st.block_tables.iter_mut().zip(&s.block_ids) {
                    table.truncate(s.table_offset);
                    table.extend_from_slice(ids);
                }
            }
        }
        Ok(())
    }

    /// Asks the proposer for each speculating sequence's tokens; `drafts[i]` for
    /// `step.scheduled[i]` (empty where it does not speculate or nothing was proposed), with
    /// the draft model's distribution behind each token where it sampled them.
    fn propose(&mut self, step: &SchedulerOutput) -> Proposals {
        let mut drafts = vec![Vec::new(); step.scheduled.len()];
        let mut probs = vec![Vec::new(); step.scheduled.len()];
        let Some(proposer) = &mut self.proposer else {
            return (drafts, probs);
        };
        let mut reqs = Vec::new();
        let mut sampling = Vec::new();
        let mut at = Vec::new();
        for (i, s) in step.scheduled.iter().enumerate() {
            let Some(st) = self.seqs.get(&s.seq_id) else {
                continue;
            };
            // Only a decode (its one known token left) may speculate: the scheduler's rule.
            if s.num_spec_tokens == 0
                || st.failed.is_some()
                || s.num_computed_tokens + 1 != st.tokens.len()
            {
                continue;
            }
            reqs.push(ProposeRequest {
                seq_id: s.seq_id,
                tokens: &st.tokens,
                prompt_len: st.prompt_len,
                max_tokens: s.num_spec_tokens,
            });
            sampling.push(Some(st.sampler.params()));
            at.push(i);
        }
        if reqs.is_empty() {
            return (drafts, probs);
        }
        self.proposal_probs.clear();
        match proposer {
            Proposing::Draft(d) => d.propose_sampled(
                &reqs,
                &sampling,
                &mut self.proposals,
                &mut self.proposal_probs,
            ),
            Proposing::Tokens(p) => p.propose(&reqs, &mut self.proposals),
        }
        let vocab = self.exec.vocab_size() as u32;
        for (j, &i) in at.iter().enumerate() {
            let Some(p) = self.proposals.get_mut(j) else {
                continue;
            };
            // A proposal is only a guess: cut it at K and at any id outside the vocabulary.
            let k = step.scheduled[i].num_spec_tokens;
            let valid = p.iter().take(k).take_while(|&&t| t < vocab).count();
            p.truncate(valid);
            drafts[i] = std::mem::take(p);
            if let Some(q) = self.proposal_probs.get_mut(j)
                && !q.is_empty()
            {
                q.truncate(valid);
                probs[i] = std::mem::take(q);
            }
        }
        (drafts, probs)
    }
}

impl ModelExecutor for ModelRunner {
    fn execute(&mut self, step: &SchedulerOutput) -> Result<ExecutorOutput, ExecutorError> {
        self.send_copies(step)?;
        self.tier_copies(step)?;
        self.apply_diff(step)?;
        if step.scheduled.is_empty() {
            return Ok(ExecutorOutput::default()); // tier copies only
        }
        let (mut drafts, mut draft_probs) = self.propose(step);
        // Proposed tokens join their sequence's tokens for this step's chunk only.
        for (s, d) in step.scheduled.iter().zip(&drafts) {
            if let Some(st) = self.seqs.get_mut(&s.seq_id) {
                st.tokens.extend_from_slice(d);
            }
        }
        let lens: Vec<usize> = drafts.iter().map(Vec::len).collect();
        let result = self.run_step(step, &mut drafts, &mut draft_probs);
        for (s, &n) in step.scheduled.iter().zip(&lens) {
            if n > 0
                && let Some(st) = self.seqs.get_mut(&s.seq_id)
            {
                st.tokens.truncate(st.tokens.len() - n);
            }
        }
        let (mut out, plans, sampled) = result?;
        self.finish_step(&mut out, &plans, sampled);
        if let Some(Proposing::Draft(d)) = &mut self.proposer {
            out.draft = d.take_work();
            out.draft_fed = d.take_fed();
        }
        Ok(out)
    }

    fn save_blocks(&mut self, blocks: &[(u32, pagoda_core::kv::BlockHash)]) {
        let Some(tier) = &self.tier else {
            return;
        };
        let ids: Vec<u32> = blocks.iter().map(|&(b, _)| b).collect();
        match self.exec.read_blocks(&ids) {
            Ok(payloads) => {
                for (&(_, key), payload) in blocks.iter().zip(payloads) {
                    tier.save_blocking(key, payload);
                }
            }
            Err(e) => tracing::error!("KV tier: blocks not saved: {e}"),
        }
    }

    fn calibrate(&mut self) -> Calibration {
        let draft = match &mut self.proposer {
            Some(Proposing::Draft(d)) => d.calibrate(),
            _ => Vec::new(),
        };
        Calibration {
            target: time_steps(&mut self.exec, CALIBRATION_TOKENS),
            draft,
        }
    }
}

/// Where proposals come from: a token-only proposer, or a draft model (which also reports
/// what its forwards cost).
enum Proposing {
    Tokens(Box<dyn Proposer>),
    Draft(Box<DraftProposer>),
}

impl Proposing {
    fn get(&mut self) -> &mut dyn Proposer {
        match self {
            Self::Tokens(p) => p.as_mut(),
            Self::Draft(d) => d.as_mut(),
        }
    }
}

/// Per scheduled sequence: proposed tokens, and the draft distributions behind them.
type Proposals = (Vec<Vec<u32>>, Vec<Vec<Vec<f32>>>);

type StepRun = (
    ExecutorOutput,
    Vec<RowPlan>,
    Vec<Option<Result<Vec<Sampled>, ConstraintError>>>,
);

impl ModelRunner {
    /// Builds and runs the step's batch (proposals already appended to the tokens) and samples.
    fn run_step(
        &mut self,
        step: &SchedulerOutput,
        drafts: &mut [Vec<u32>],
        draft_probs: &mut [Vec<Vec<f32>>],
    ) -> Result<StepRun, ExecutorError> {
        let mut out = ExecutorOutput::default();
        let block_size = self.exec.kv_cache.block_size();
        let mut chunks = Vec::with_capacity(step.scheduled.len());
        let mut plans = Vec::with_capacity(step.scheduled.len());
        let mut rows = 0;
        let mut adapters: Vec<Arc<LoraAdapter>> = Vec::new();
        let mut seq_loras = Vec::with_capacity(step.scheduled.len());
        for ((s, d), q) in step
            .scheduled
            .iter()
            .zip(drafts.iter_mut())
            .zip(draft_probs)
        {
            let st = &self.seqs[&s.seq_id];
            if let Some(e) = &st.failed {
                // Ends it in the core before its results would be read; nothing to compute.
                out.failed.push((s.seq_id, e.clone()));
                continue;
            }
            // Only the proposals made are computed; unused speculative slots stay empty.
            let (start, end) = (
                s.num_computed_tokens,
                s.num_computed_tokens + s.num_scheduled_tokens - s.num_spec_tokens + d.len(),
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
            let logits = if pl_rows > 0 || !d.is_empty() {
                Logits::All
            } else if samples {
                Logits::Last
            } else {
                Logits::None
            };
            if s.num_spec_tokens > 0 {
                out.proposed.push((s.seq_id, d.len()));
            }
            plans.push(RowPlan {
                seq_id: s.seq_id,
                first_row: rows,
                pl_start: start,
                pl_rows,
                num_rows: end - start,
                samples,
                drafts: std::mem::take(d),
                draft_probs: std::mem::take(q),
            });
            rows += match logits {
                Logits::All => end - start,
                Logits::Last => 1,
                Logits::None => 0,
            };
            chunks.push(SeqChunk {
                tokens: &st.tokens[start..end],
                start,
                block_tables: &st.block_tables,
                logits,
            });
            seq_loras.push(st.lora.as_ref().map(|l| {
                let i = adapters.iter().position(|a| Arc::ptr_eq(a, l));
                i.unwrap_or_else(|| {
                    adapters.push(l.clone());
                    adapters.len() - 1
                }) as u32
            }));
        }
        if chunks.is_empty() {
            return Ok((out, plans, Vec::new()));
        }
        let mut batch = ForwardBatch::from_seqs(&chunks, block_size);
        drop(chunks);
        if !adapters.is_empty() {
            batch.seq_loras = seq_loras;
        }
        let vocab = self.exec.vocab_size();
        let logits = self
            .exec
            .forward_with_loras(&batch, &adapters)
            .map_err(|e| ExecutorError(e.to_string()))?;
        for p in plans.iter().filter(|p| p.pl_rows > 0) {
            let Some(st) = self.seqs.get(&p.seq_id) else {
                continue;
            };
            let k = st.prompt_logprobs.unwrap_or(0) as usize;
            let rows = &logits[p.first_row * vocab..(p.first_row + p.pl_rows) * vocab];
            let targets = &st.tokens[p.pl_start + 1..p.pl_start + 1 + p.pl_rows];
            out.prompt_logprobs
                .push((p.seq_id, prompt_logprobs(rows, vocab, targets, k)));
        }
        let sampled = sample_rows(&mut self.seqs, &plans, logits, vocab);
        Ok((out, plans, sampled))
    }

    /// Records each sequence's sampled tokens (after the proposals were taken off again).
    fn finish_step(
        &mut self,
        out: &mut ExecutorOutput,
        plans: &[RowPlan],
        mut sampled: Vec<Option<Result<Vec<Sampled>, ConstraintError>>>,
    ) {
        for (p, sampled) in plans.iter().zip(&mut sampled) {
            let Some(st) = self.seqs.get_mut(&p.seq_id) else {
                continue;
            };
            match sampled.take() {
                None => {}
                Some(Err(e)) => {
                    st.failed = Some(e.to_string());
                    out.failed.push((p.seq_id, e.to_string()));
                }
                Some(Ok(run)) => {
                    for sampled in run {
                        st.tokens.push(sampled.token_id);
                        out.sampled.push(SampledToken {
                            seq_id: p.seq_id,
                            token_id: sampled.token_id,
                            logprobs: sampled.position_logprobs(),
                        });
                    }
                }
            }
        }
    }
}

fn executor_error(e: ModelError) -> ExecutorError {
    ExecutorError(e.to_string())
}
