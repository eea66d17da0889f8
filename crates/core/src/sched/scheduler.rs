//! The scheduler: each step, every running sequence's `num_computed_tokens` catches up toward
//! its `num_tokens` under one token budget and a sequence cap. Running sequences go first (a
//! decode is one token; a long prompt is chunked), then waiting ones in queue order. When the
//! pool runs dry, the lowest-priority, latest-arrived running sequence is preempted: its blocks
//! are freed and it is recomputed later from the front of the queue. With speculation on,
//! what budget is left goes last to decoding sequences as slots for proposed tokens, never at
//! the cost of a preemption; rejected ones give their slots back when the step's result lands.
//! With context shift on, a sequence that fills `max_model_len` drops the middle of its context
//! (`context_shift.rs`) and goes on.

use std::collections::HashMap;
use std::time::Instant;

use super::output::{ContextShift, NewSeqData, ScheduledSeq, SchedulerOutput};
use super::queue::{QueueKey, WaitingQueue};
use super::stop::check_stop;
use crate::config::SchedulerConfig;
use crate::kv::{BlockId, ComputedBlocks, KvCacheManager, KvSend, KvTransfer, NULL_BLOCK};
use crate::request::{FinishReason, Request, RequestStatus, SeqId};
use crate::slo::SloPolicy;
use crate::speculative::{SpecConfig, SpecController};

/// What the executor produced for one sequence in a step.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SeqResult {
    /// Tokens to append, in order: accepted proposed tokens, then the one the target chose.
    pub tokens: Vec<u32>,
    /// Tokens proposed and verified (of the step's `num_spec_tokens` slots).
    pub num_proposed: usize,
}

/// A sequence that produced output this step (a token, a finish, or both).
#[derive(Clone, Debug, PartialEq)]
pub struct SeqUpdate {
    pub seq_id: SeqId,
    /// Tokens appended this step (more than one when proposed tokens were accepted).
    pub new_tokens: Vec<u32>,
    pub finish: Option<FinishReason>,
    pub prompt_len: usize,
    pub num_output_tokens: usize,
    pub num_cached_tokens: usize,
    pub arrival: Instant,
    pub first_scheduled: Option<Instant>,
}

/// Counters the scheduler keeps (tokens and events since start).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SchedulerCounters {
    pub preemptions: u64,
    /// Context shifts made (sequences that reached `max_model_len` and went on).
    pub context_shifts: u64,
    pub prompt_tokens_computed: u64,
    pub steps: u64,
}

/// Requests, queues and block accounting of one engine.
#[derive(Debug)]
pub struct Scheduler {
    pub(super) config: SchedulerConfig,
    pub(super) kv: KvCacheManager,
    eog_ids: Vec<u32>,
    pub(super) requests: HashMap<SeqId, Request>,
    waiting: WaitingQueue,
    /// In admission order.
    pub(super) running: Vec<SeqId>,
    /// Sequences the executor has seen (it holds their state until told they finished).
    known_to_executor: std::collections::HashSet<SeqId>,
    finished_since_last_step: Vec<SeqId>,
    pub(super) spec: Option<SpecController>,
    /// The SLO policy (`--slo`): each step's budget and admission sized to the TPOT target.
    pub(super) slo: Option<SloPolicy>,
    /// Shifts made since each sequence's last step, for its next `ScheduledSeq`.
    pub(super) pending_shifts: HashMap<SeqId, ContextShift>,
    /// Prompt blocks of finished prefill-role requests, held until the next step ships them.
    pending_sends: Vec<KvSend>,
    pub counters: SchedulerCounters,
}

impl Scheduler {
    pub fn new(config: SchedulerConfig, kv: KvCacheManager, eog_ids: Vec<u32>) -> Self {
        let waiting = WaitingQueue::new(config.policy, config.max_num_batched_tokens);
        Self {
            config,
            kv,
            eog_ids,
            requests: HashMap::new(),
            waiting,
            running: Vec::new(),
            known_to_executor: Default::default(),
            finished_since_last_step: Vec::new(),
            spec: None,
            slo: None,
            pending_shifts: HashMap::new(),
            pending_sends: Vec::new(),
            counters: SchedulerCounters::default(),
        }
    }

    /// Turns speculative decoding on.
    pub fn set_speculation(&mut self, config: SpecConfig) {
        self.spec = Some(SpecController::new(config));
    }

    /// The speculation policy, when on.
    pub fn speculation(&self) -> Option<&SpecController> {
        self.spec.as_ref()
    }

    pub fn speculation_mut(&mut self) -> Option<&mut SpecController> {
        self.spec.as_mut()
    }

    /// A draft model now holds `fed` tokens of `seq` (see `Request::draft_fed`).
    pub fn note_draft_fed(&mut self, seq: SeqId, fed: usize) {
        if let Some(r) = self.requests.get_mut(&seq) {
            r.draft_fed = fed;
        }
    }

    pub fn config(&self) -> &SchedulerConfig {
        &self.config
    }

    pub fn kv(&self) -> &KvCacheManager {
        &self.kv
    }

    /// For KV cache events only: the scheduler's block accounting stays its own.
    pub fn kv_events_mut(&mut self) -> &mut KvCacheManager {
        &mut self.kv
    }

    pub fn request(&self, seq: SeqId) -> Option<&Request> {
        self.requests.get(&seq)
    }

    pub fn num_waiting(&self) -> usize {
        self.waiting.len()
    }

    pub fn num_running(&self) -> usize {
        self.running.len()
    }

    pub fn running(&self) -> &[SeqId] {
        &self.running
    }

    pub fn has_unfinished(&self) -> bool {
        // Held prompt blocks of finished prefill-role requests still need a step to ship.
        !self.requests.is_empty() || !self.pending_sends.is_empty()
    }

    /// KV slots held by running sequences, and how many of them hold a computed token; the
    /// difference is the waste of partially filled blocks (shared blocks count once per holder;
    /// each KV group's blocks count on their own).
    pub fn kv_slot_usage(&self) -> (usize, usize) {
        let bs = self.kv.block_size();
        self.running.iter().fold((0, 0), |(alloc, used), s| {
            let computed = self.requests.get(s).map_or(0, |r| r.num_computed_tokens);
            let (mut a, mut u) = (0, 0);
            for table in self.kv.block_tables(*s) {
                let first = table.iter().take_while(|&&b| b == NULL_BLOCK).count();
                let held = table.len() - first;
                a += held * bs;
                u += computed.saturating_sub(first * bs).min(held * bs);
            }
            (alloc + a, used + u)
        })
    }

    /// Queues a sequence (already validated by the engine).
    pub fn add_request(&mut self, req: Request) {
        let key = QueueKey {
            fresh: true,
            priority: req.priority,
            arrival_seq: req.arrival_seq,
        };
        self.waiting
            .push(req.seq_id, key, req.tenant, req.num_tokens());
        self.requests.insert(req.seq_id, req);
    }

    /// Ends a sequence wherever it is, freeing its blocks. Returns false if it was unknown.
    pub fn finish(&mut self, seq: SeqId, reason: FinishReason) -> bool {
        let Some(mut req) = self.requests.remove(&seq) else {
            return false;
        };
        match req.status {
            RequestStatus::Running => self.running.retain(|&s| s != seq),
            RequestStatus::Waiting | RequestStatus::Preempted => {
                self.waiting.remove(seq);
            }
            RequestStatus::Finished(_) => {}
        }
        if let Some(KvTransfer::Send { id, addr }) = &req.params.kv_transfer
            && matches!(reason, FinishReason::Stop(_) | FinishReason::Length)
        {
            let blocks = self.kv.hold_prompt_blocks(&req);
            self.pending_sends.push(KvSend {
                id: id.clone(),
                addr: addr.clone(),
                blocks,
            });
        }
        self.kv.free(seq);
        self.pending_shifts.remove(&seq);
        if let (Some(load), Some(tier)) = (req.loading.take(), self.kv.tier()) {
            tier.cancel(load.ticket);
        }
        req.status = RequestStatus::Finished(reason);
        if self.known_to_executor.remove(&seq) {
            self.finished_since_last_step.push(seq);
        }
        true
    }

    /// Plans one step.
    pub fn schedule(&mut self) -> SchedulerOutput {
        let mut out = SchedulerOutput {
            finished_seq_ids: std::mem::take(&mut self.finished_since_last_step),
            ..Default::default()
        };
        // Under the SLO policy the budget is what keeps the step within the TPOT target, and a
        // token of it is kept for each decode until its turn, so no prefill ahead takes it.
        let (mut budget, mut reserve) = self.step_budget();
        let now = Instant::now();

        // Running sequences first, in admission order.
        let mut i = 0;
        while i < self.running.len() && budget > 0 {
            let seq = self.running[i];
            if self.requests[&seq].needs_shift && !self.shift(seq) {
                out.preempted_seq_ids.push(seq);
                continue; // recomputed after its shift; index i now holds the next one
            }
            if reserve > 0 && self.is_decoding(seq) {
                reserve -= 1;
            }
            let n = self.num_new_tokens(seq, 0, budget.saturating_sub(reserve));
            if n == 0 {
                i += 1;
                continue;
            }
            let blocks = loop {
                let req = &self.requests[&seq];
                if let Some(b) = self.kv.allocate_slots(req, n, &ComputedBlocks::default()) {
                    break Some(b);
                }
                // Out of blocks: preempt the lowest-priority, latest-arrived sequence not yet
                // scheduled this step (possibly this one).
                let victim = self.running[i..]
                    .iter()
                    .copied()
                    .max_by_key(|s| {
                        let r = &self.requests[s];
                        (r.priority, r.arrival_seq)
                    })
                    .unwrap_or(seq);
                self.preempt(victim);
                out.preempted_seq_ids.push(victim);
                if victim == seq {
                    break None;
                }
            };
            let Some(block_ids) = blocks else {
                continue; // `seq` left `running`; index i now holds the next one
            };
            budget -= n;
            out.scheduled
                .push(self.scheduled_entry(seq, block_ids, n, false, now));
            i += 1;
        }

        // Then waiting sequences, unless this step had to preempt (no room for newcomers).
        if out.preempted_seq_ids.is_empty() {
            let candidates: Vec<SeqId> = self.waiting.iter().collect();
            let mut loras = self.running_lora_digests();
            for seq in candidates {
                if budget == 0 || self.running.len() >= self.config.max_num_seqs {
                    break;
                }
                if let Some(slo) = &self.slo
                    && !slo.admits(self.running.len() + 1)
                {
                    break; // one more decode would break the TPOT target: first come waits
                }
                let lora = self.requests.get(&seq).and_then(Request::lora_digest);
                if let Some(d) = lora
                    && !loras.contains(&d)
                    && self.config.max_loras > 0
                    && loras.len() >= self.config.max_loras
                {
                    continue; // --max-loras adapters already run: this one waits, others go on
                }
                let computed = match self.requests.get(&seq) {
                    Some(req) => self.kv.get_computed_blocks(req),
                    None => continue,
                };
                let computed = match self.through_tier(seq, computed, &mut out) {
                    Some(c) => c,
                    None => continue, // its blocks are being read from the tier
                };
                let req = &self.requests[&seq];
                if self.kv.next_block_in_flight(req, computed.num_blocks()) {
                    // Another sequence is computing this prefix right now: wait for it rather
                    // than compute the same KV twice (requests that arrive together share too).
                    continue;
                }
                let n = self.num_new_tokens(seq, computed.num_tokens, budget);
                let Some(block_ids) = self.kv.allocate_slots(req, n, &computed) else {
                    break; // the pool is full: later arrivals would not fit either
                };
                self.waiting.remove(seq);
                self.kv.record_query(req.num_tokens(), computed.num_tokens);
                let mut resumed = false;
                if let Some(r) = self.requests.get_mut(&seq) {
                    resumed = r.status == RequestStatus::Preempted;
                    r.num_computed_tokens += computed.num_tokens;
                    r.num_cached_tokens.get_or_insert(computed.num_tokens);
                    r.status = RequestStatus::Running;
                }
                self.running.push(seq);
                if let Some(d) = lora
                    && !loras.contains(&d)
                {
                    loras.push(d);
                }
                budget -= n;
                out.scheduled
                    .push(self.scheduled_entry(seq, block_ids, n, resumed, now));
            }
        }
        if self.spec.is_some() && out.preempted_seq_ids.is_empty() {
            self.add_speculation(&mut out, budget);
        }
        out.kv_saves = self.kv.take_saves();
        // Nothing allocates between here and the executor's copy-out of these blocks.
        out.kv_sends = std::mem::take(&mut self.pending_sends);
        for send in &out.kv_sends {
            self.kv.release_held(&send.blocks);
        }
        out.total_num_scheduled_tokens = out.scheduled.iter().map(|s| s.num_scheduled_tokens).sum();
        for s in &out.scheduled {
            if let Some(r) = self.requests.get(&s.seq_id) {
                self.waiting.charge(r.tenant, s.num_scheduled_tokens);
            }
        }
        self.counters.steps += 1;
        out
    }

    /// Names of the distinct adapters of the running (or the waiting) sequences.
    pub fn lora_names(&self, running: bool) -> Vec<std::sync::Arc<str>> {
        let seqs: Vec<SeqId> = if running {
            self.running.clone()
        } else {
            self.waiting.iter().collect()
        };
        let mut out: Vec<std::sync::Arc<str>> = Vec::new();
        for s in seqs {
            if let Some(l) = self.requests.get(&s).and_then(|r| r.params.lora.as_ref())
                && !out.iter().any(|n| **n == *l.name())
            {
                out.push(l.shared_name().clone());
            }
        }
        out
    }

    /// The distinct adapters of the running sequences.
    fn running_lora_digests(&self) -> Vec<u64> {
        let mut out = Vec::new();
        for d in self
            .running
            .iter()
            .filter_map(|s| self.requests.get(s)?.lora_digest())
        {
            if !out.contains(&d) {
                out.push(d);
            }
        }
        out
    }

    /// Tokens `seq` would compute this step after a prefix hit of `hit` tokens.
    fn num_new_tokens(&self, seq: SeqId, hit: usize, budget: usize) -> usize {
        let req = &self.requests[&seq];
        let mut n = req.num_tokens() - req.num_computed_tokens - hit;
        let threshold = self.config.long_prefill_token_threshold;
        if threshold > 0 {
            n = n.min(threshold);
        }
        n.min(budget)
    }

    fn scheduled_entry(
        &mut self,
        seq: SeqId,
        block_ids: Vec<Vec<BlockId>>,
        n: usize,
        resumed: bool,
        now: Instant,
    ) -> ScheduledSeq {
        let first_time = self.known_to_executor.insert(seq);
        let req = self
            .requests
            .get_mut(&seq)
            .map(|r| {
                r.first_scheduled.get_or_insert(now);
                &*r
            })
            .expect("scheduled sequences exist"); // invariant: callers looked it up
        // A resumed or shifted sequence's table restarts from scratch: send it whole.
        let shift = self.pending_shifts.remove(&seq);
        let block_ids = if resumed || first_time || shift.is_some() {
            self.kv.block_tables(seq).to_vec()
        } else {
            block_ids
        };
        let table_offset = self.kv.table_len(seq) - block_ids.first().map_or(0, Vec::len);
        ScheduledSeq {
            seq_id: seq,
            table_offset,
            new: first_time.then(|| NewSeqData {
                prompt_token_ids: req.token_ids[..req.prompt_len].to_vec(),
                params: req.params.clone(),
                seed: req.seed,
            }),
            resumed: resumed && !first_time,
            block_ids,
            num_computed_tokens: req.num_computed_tokens,
            num_scheduled_tokens: n,
            num_spec_tokens: 0,
            shift,
        }
    }

    pub(super) fn preempt(&mut self, seq: SeqId) {
        self.running.retain(|&s| s != seq);
        self.kv.free(seq);
        if let Some(s) = self.pending_shifts.get_mut(&seq) {
            s.copies.clear(); // its KV is gone: recomputed at the shifted positions
        }
        if let Some(r) = self.requests.get_mut(&seq) {
            r.num_computed_tokens = 0;
            r.num_preemptions += 1;
            r.tier_checked = false; // its blocks may have gone to the tier meanwhile
            r.status = RequestStatus::Preempted;
            let key = QueueKey {
                fresh: false,
                priority: r.priority,
                arrival_seq: r.arrival_seq,
            };
            self.waiting.push(seq, key, r.tenant, r.num_tokens());
        }
        self.counters.preemptions += 1;
    }

    /// Applies a step's results: advances `num_computed_tokens`, appends the tokens each
    /// sequence produced (stopping at the first token-level stop among them), gives back the
    /// slots of rejected proposals, caches newly full blocks and frees finished sequences.
    pub fn update_from_output(
        &mut self,
        out: &SchedulerOutput,
        results: &HashMap<SeqId, SeqResult>,
    ) -> Vec<SeqUpdate> {
        let mut updates = Vec::new();
        let block_size = self.kv.block_size();
        for s in &out.scheduled {
            let Some(req) = self.requests.get_mut(&s.seq_id) else {
                continue; // aborted while the step ran
            };
            if req.status != RequestStatus::Running {
                continue;
            }
            let known = s.num_scheduled_tokens - s.num_spec_tokens;
            if req.num_computed_tokens < req.prompt_len {
                let prompt_part = (req.prompt_len - req.num_computed_tokens).min(known);
                self.counters.prompt_tokens_computed += prompt_part as u64;
            }
            req.num_computed_tokens += known;
            debug_assert!(req.num_computed_tokens <= req.num_tokens());
            let result = results.get(&s.seq_id);
            let mut new_tokens = Vec::new();
            let mut finish = None;
            for &t in result.map_or(&[][..], |r| &r.tokens[..]) {
                if !new_tokens.is_empty() {
                    // The token before this one was a proposal the target accepted: its KV
                    // was computed in this step's verification pass.
                    req.num_computed_tokens += 1;
                }
                req.append_token(t, block_size);
                new_tokens.push(t);
                finish = check_stop(req, &self.eog_ids, self.config.max_model_len);
                if finish == Some(FinishReason::Length)
                    && let Some(keep) = self.config.context_shift_keep
                    && req.num_output_tokens() < req.params.max_tokens as usize
                    && Self::shift_plan(req, keep, block_size).is_some()
                {
                    req.needs_shift = true;
                    finish = None;
                    break;
                }
                if finish.is_some() {
                    break;
                }
            }
            if s.num_spec_tokens > 0 {
                let accepted = result.map_or(0, |r| r.tokens.len().saturating_sub(1));
                let proposed = result.map_or(0, |r| r.num_proposed);
                req.acceptance.record(s.num_spec_tokens, accepted);
                if let Some(spec) = self.spec.as_mut() {
                    spec.record(s.num_spec_tokens, proposed, accepted);
                }
                self.kv.trim(&self.requests[&s.seq_id]);
            }
            self.kv.cache_full_blocks(&self.requests[&s.seq_id]);
            if new_tokens.is_empty() {
                continue;
            }
            let req = &self.requests[&s.seq_id];
            let update = SeqUpdate {
                seq_id: s.seq_id,
                new_tokens,
                finish: finish.clone(),
                prompt_len: req.original_prompt_len(),
                num_output_tokens: req.num_output_tokens(),
                num_cached_tokens: req.num_cached_tokens.unwrap_or(0),
                arrival: req.arrival,
                first_scheduled: req.first_scheduled,
            };
            if let Some(reason) = finish {
                self.finish(s.seq_id, reason);
            }
            updates.push(update);
        }
        updates
    }
}
