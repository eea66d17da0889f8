//! `EngineCore`: one synchronous step = schedule -> execute -> update. It owns the scheduler and
//! the executor and nothing else; no locks, no async, no I/O. A request with `n > 1` becomes n
//! sequences with consecutive seeds; prefix caching lets them share the prompt's blocks. This
//! is the only fan-out of `n`: a front end sees one request and aborts choices one by one.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use crate::add_request_error::AddRequestError;
use crate::admission::{Admission, QueueSlots};
use crate::config::{CacheConfig, SchedulerConfig};
use crate::engine_output::{EngineOutput, OutputTiming};
use crate::engine_request::{EngineRequest, RequestId};
use crate::engine_stats::{EngineStats, KvGroupUsage};
use crate::executor::ModelExecutor;
use crate::kv::block_hash::root_hash;
use crate::kv::{BlockHash, KvCacheManager, KvEvent, KvTier};
use crate::logprobs::PositionLogprobs;
use crate::request::{FinishReason, Request, SeqId};
use crate::sched::{Scheduler, SeqResult};
use crate::slo::{SloGate, SloPolicy, SloTargets};
use crate::speculative::{NumSpecTokens, SpecConfig};
use crate::validation::{CheckedRequest, RequestLimits};

struct SeqInfo {
    request_id: RequestId,
    index: u32,
    prompt_logprobs: Vec<PositionLogprobs>,
    wants_prompt_logprobs: bool,
    /// Its waiting-queue slot, given back when it is first scheduled (or ends before that).
    slot: Option<QueueSlots>,
}

/// Schedule -> execute -> update, one step at a time.
pub struct EngineCore<E: ModelExecutor> {
    scheduler: Scheduler,
    executor: E,
    limits: RequestLimits,
    admission: Arc<Admission>,
    seqs: HashMap<SeqId, SeqInfo>,
    by_request: HashMap<RequestId, Vec<SeqId>>,
    next_seq: SeqId,
    seed_counter: u64,
    generation_tokens: u64,
    peak_kv: (usize, usize),
    /// Parent of every request's first block hash, from `CacheConfig::hash_seed`.
    hash_root: BlockHash,
    /// The SLO policy's door, given the load after every step (`None`: no SLO).
    slo_gate: Option<Arc<SloGate>>,
}

impl<E: ModelExecutor> EngineCore<E> {
    /// An engine over `executor`, whose arena must have `cache.num_blocks` blocks of
    /// `cache.block_size`; `eog_ids` are the model's end-of-generation tokens.
    pub fn new(
        executor: E,
        scheduler_config: SchedulerConfig,
        cache: &CacheConfig,
        eog_ids: Vec<u32>,
        vocab_size: usize,
    ) -> Self {
        let kv = KvCacheManager::with_groups(
            cache.num_blocks,
            cache.block_size,
            cache.enable_prefix_caching,
            cache.groups.clone(),
        );
        // Per-process entropy for unseeded requests; seeded ones never use it.
        let seed_counter = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let limits = RequestLimits {
            vocab_size,
            max_model_len: scheduler_config.max_model_len,
            context_shift: scheduler_config.context_shift_keep.is_some(),
        };
        let admission = Admission::new(scheduler_config.max_waiting_requests);
        Self {
            scheduler: Scheduler::new(scheduler_config, kv, eog_ids),
            executor,
            limits,
            admission,
            seqs: HashMap::new(),
            by_request: HashMap::new(),
            next_seq: 0,
            seed_counter,
            generation_tokens: 0,
            peak_kv: (0, 0),
            hash_root: root_hash(&cache.hash_seed),
            slo_gate: None,
        }
    }

    /// Turns speculative decoding on: the executor must propose and verify (it was built with
    /// a proposer). With `auto` K it is timed first so the choice has a cost curve from the
    /// first step; a fixed K never reads the curve, so it starts without the timing (seconds
    /// on a 1.5B model), and steps still teach the curve as they run.
    pub fn enable_speculation(&mut self, config: SpecConfig) {
        if !matches!(config.num_speculative_tokens, NumSpecTokens::Auto { .. }) {
            self.scheduler.set_speculation(config);
            return;
        }
        let calibration = self.executor.calibrate();
        let ms = |v: &[(usize, f64)]| {
            v.iter()
                .map(|(t, s)| format!("{t}: {:.1} ms", s * 1e3))
                .collect::<Vec<_>>()
                .join(", ")
        };
        tracing::info!(
            "step cost by batch tokens: {}; draft forward by sequences: {}",
            ms(&calibration.target),
            ms(&calibration.draft)
        );
        self.scheduler.set_speculation(config);
        if let Some(spec) = self.scheduler.speculation_mut() {
            spec.calibrate(&calibration.target, &calibration.draft);
        }
    }

    /// Turns the SLO policy on (`--slo`). The executor is timed first, so the step budget and
    /// the door predict from the first request; steps refine the curve as they run. Returns
    /// the door the handle checks new requests at.
    pub fn enable_slo(&mut self, targets: SloTargets) -> Arc<SloGate> {
        let mut policy = SloPolicy::new(targets);
        policy.calibrate(self.executor.calibrate().target);
        self.enable_slo_policy(policy)
    }

    /// The same with a policy made elsewhere (a fixed cost curve, in tests).
    pub fn enable_slo_policy(&mut self, policy: SloPolicy) -> Arc<SloGate> {
        let gate = Arc::new(SloGate::new(policy.targets().ttft));
        self.scheduler.set_slo(policy);
        self.slo_gate = Some(Arc::clone(&gate));
        self.publish_slo_load();
        gate
    }

    pub fn slo_gate(&self) -> Option<&Arc<SloGate>> {
        self.slo_gate.as_ref()
    }

    fn publish_slo_load(&self) {
        if let (Some(gate), Some(load)) = (&self.slo_gate, self.scheduler.slo_load()) {
            gate.publish(load);
        }
    }

    pub fn scheduler(&self) -> &Scheduler {
        &self.scheduler
    }

    /// Starts recording KV cache events (call before the first request).
    pub fn enable_kv_events(&mut self) {
        self.scheduler.kv_events_mut().enable_events();
    }

    /// The prefix cache's changes since the last call.
    pub fn take_kv_events(&mut self) -> Vec<KvEvent> {
        self.scheduler.kv_events_mut().take_events()
    }

    /// `AllBlocksCleared` then every cached block: for subscribers that lost events.
    pub fn kv_resync_events(&mut self) -> Vec<KvEvent> {
        self.scheduler.kv_events_mut().resync_events()
    }

    /// Attaches a lower KV tier (the disk store): evicted blocks go there and prefix hits may
    /// come back from it (call before the first request).
    pub fn set_kv_tier(&mut self, tier: Arc<dyn KvTier>) {
        self.scheduler.kv_events_mut().set_tier(tier);
    }

    /// Saves every block the memory cache holds to the lower tier (at shutdown).
    pub fn flush_kv_tier(&mut self) {
        let kv = self.scheduler.kv();
        if kv.tier().is_some_and(|t| t.enabled() && t.takes_saves()) {
            let blocks = kv.cached_blocks();
            let blocks: Vec<_> = match kv.tier() {
                Some(t) => blocks.into_iter().filter(|(_, k)| !t.contains(k)).collect(),
                None => blocks,
            };
            self.executor.save_blocks(&blocks);
        }
    }

    /// Whether the only work left is waiting for tier reads (the engine loop then sleeps a
    /// little instead of spinning).
    pub fn waiting_on_tier(&self) -> bool {
        self.scheduler.num_running() == 0
            && (self.scheduler.num_loading() > 0 || self.scheduler.num_awaiting_transfer() > 0)
    }

    pub fn executor(&self) -> &E {
        &self.executor
    }

    pub fn executor_mut(&mut self) -> &mut E {
        &mut self.executor
    }

    /// Whether any request is waiting or running.
    pub fn has_work(&self) -> bool {
        self.scheduler.has_unfinished()
    }

    /// What this engine accepts; [`RequestLimits::check`] is the one validation of a request.
    pub fn limits(&self) -> RequestLimits {
        self.limits
    }

    /// The waiting-queue counter, shared with the handle that admits requests.
    pub fn admission(&self) -> &Arc<Admission> {
        &self.admission
    }

    /// Checks a request, takes its queue slots and queues its sequences.
    pub fn add_request(&mut self, req: EngineRequest) -> Result<(), AddRequestError> {
        let req = self.limits.check(req)?;
        let slots = self.admission.reserve(req.get().params.n.max(1) as usize)?;
        self.add_checked(req, slots)
    }

    /// Queues a checked request's sequences, each holding one of `slots`.
    pub fn add_checked(
        &mut self,
        req: CheckedRequest,
        mut slots: QueueSlots,
    ) -> Result<(), AddRequestError> {
        debug_assert_eq!(self.limits.check(req.get().clone()).as_ref(), Ok(&req));
        let req = req.into_inner();
        if self.by_request.contains_key(&req.id) {
            return Err(AddRequestError::DuplicateId(req.id));
        }
        let n = req.params.n.max(1);
        debug_assert_eq!(slots.len(), n as usize, "one queue slot per sequence");
        let mut ids = Vec::with_capacity(n as usize);
        let base_seed = req.params.seed.unwrap_or_else(|| {
            self.seed_counter = self.seed_counter.wrapping_add(0x9E37_79B9_7F4A_7C15);
            self.seed_counter
        });
        let block_size = self.scheduler.kv().block_size();
        for index in 0..n {
            let seq = self.next_seq;
            self.next_seq += 1;
            let mut r = Request::new(
                seq,
                req.prompt_token_ids.clone(),
                req.params.clone(),
                base_seed.wrapping_add(u64::from(index)),
                req.priority,
                seq,
                req.extra_keys.chain(self.hash_root),
                block_size,
            );
            r.tenant = req.tenant;
            self.scheduler.add_request(r);
            self.seqs.insert(
                seq,
                SeqInfo {
                    request_id: req.id,
                    index,
                    prompt_logprobs: Vec::new(),
                    wants_prompt_logprobs: req.params.prompt_logprobs.is_some(),
                    slot: Some(slots.split(1)),
                },
            );
            ids.push(seq);
        }
        self.by_request.insert(req.id, ids);
        Ok(())
    }

    /// Ends every sequence of `id`; returns their final outputs (finish reason `Abort`).
    pub fn abort(&mut self, id: RequestId) -> Vec<EngineOutput> {
        self.finish_request(id, FinishReason::Abort)
    }

    /// Ends the sequence of choice `index` of `id` (a stop string ended that choice alone);
    /// returns its final output, if it was still running.
    pub fn abort_choice(&mut self, id: RequestId, index: u32) -> Option<EngineOutput> {
        let seq = self
            .by_request
            .get(&id)?
            .iter()
            .copied()
            .find(|s| self.seqs.get(s).is_some_and(|i| i.index == index))?;
        self.finish_seq(seq, FinishReason::Abort)
    }

    fn finish_request(&mut self, id: RequestId, reason: FinishReason) -> Vec<EngineOutput> {
        let seqs = self.by_request.get(&id).cloned().unwrap_or_default();
        let mut outs = Vec::new();
        for seq in seqs {
            if let Some(o) = self.finish_seq(seq, reason.clone()) {
                outs.push(o);
            }
        }
        outs
    }

    fn finish_seq(&mut self, seq: SeqId, reason: FinishReason) -> Option<EngineOutput> {
        let req = self.scheduler.request(seq)?;
        let mut out = self.empty_output(seq, req)?;
        out.finish_reason = Some(reason.clone());
        self.scheduler.finish(seq, reason);
        self.forget(seq);
        Some(out)
    }

    fn forget(&mut self, seq: SeqId) {
        if let Some(info) = self.seqs.remove(&seq)
            && let Some(list) = self.by_request.get_mut(&info.request_id)
        {
            list.retain(|&s| s != seq);
            if list.is_empty() {
                self.by_request.remove(&info.request_id);
            }
        }
    }

    fn empty_output(&self, seq: SeqId, req: &Request) -> Option<EngineOutput> {
        let info = self.seqs.get(&seq)?;
        Some(EngineOutput {
            request_id: info.request_id,
            index: info.index,
            new_token_ids: Vec::new(),
            logprobs: Vec::new(),
            prompt_logprobs: None,
            finish_reason: None,
            num_prompt_tokens: req.original_prompt_len(),
            num_cached_tokens: req.num_cached_tokens.unwrap_or(0),
            timing: OutputTiming {
                arrival: req.arrival,
                first_scheduled: req.first_scheduled,
                at: Instant::now(),
            },
        })
    }

    /// One step. Returns the outputs of every sequence that produced a token or finished.
    pub fn step(&mut self) -> Vec<EngineOutput> {
        let plan = self.scheduler.schedule();
        if plan.is_empty() {
            // Tier copies still run: evicted bytes must leave before a later step reuses
            // their blocks, and installed blocks are cached from now on.
            if plan.has_work()
                && let Err(e) = self.executor.execute(&plan)
            {
                tracing::error!("KV tier copies failed: {e}");
            }
            return Vec::new();
        }
        for s in plan.scheduled.iter().filter(|s| s.new.is_some()) {
            if let Some(info) = self.seqs.get_mut(&s.seq_id) {
                info.slot = None;
            }
        }
        let started = Instant::now();
        let result = self.executor.execute(&plan);
        let secs = started.elapsed().as_secs_f64();
        let exec = match result {
            Ok(e) => e,
            Err(e) => {
                // A failed step ends the sequences it carried, never the engine.
                tracing::error!("step failed: {e}");
                let mut outs = Vec::new();
                for s in &plan.scheduled {
                    if let Some(o) = self.finish_seq(s.seq_id, FinishReason::Error(e.0.clone())) {
                        outs.push(o);
                    }
                }
                return outs;
            }
        };
        // Failed sequences end first, so the update below skips them.
        let mut failed_outs = Vec::new();
        for (seq, msg) in exec.failed {
            if let Some(o) = self.finish_seq(seq, FinishReason::Error(msg)) {
                failed_outs.push(o);
            }
        }
        for (seq, lps) in exec.prompt_logprobs {
            if let Some(info) = self.seqs.get_mut(&seq) {
                info.prompt_logprobs.extend(lps);
            }
        }
        let mut results: HashMap<SeqId, SeqResult> = HashMap::with_capacity(exec.sampled.len());
        let mut sampled_lps: HashMap<SeqId, Vec<PositionLogprobs>> = HashMap::new();
        for s in exec.sampled {
            results.entry(s.seq_id).or_default().tokens.push(s.token_id);
            if let Some(lp) = s.logprobs {
                sampled_lps.entry(s.seq_id).or_default().push(lp);
            }
        }
        for (seq, n) in exec.proposed {
            results.entry(seq).or_default().num_proposed = n;
        }
        for (seq, fed) in exec.draft_fed {
            self.scheduler.note_draft_fed(seq, fed);
        }
        if let Some(spec) = self.scheduler.speculation_mut() {
            let computed = plan.total_num_scheduled_tokens
                - plan
                    .scheduled
                    .iter()
                    .map(|s| s.num_spec_tokens)
                    .sum::<usize>()
                + results.values().map(|r| r.num_proposed).sum::<usize>();
            spec.observe_step(computed, secs, exec.draft);
        }
        self.scheduler
            .observe_step(plan.total_num_scheduled_tokens, secs);
        let updates = self.scheduler.update_from_output(&plan, &results);
        self.publish_slo_load();
        let usage = self.scheduler.kv_slot_usage();
        if usage.0 >= self.peak_kv.0 {
            self.peak_kv = usage;
        }
        let now = Instant::now();
        let mut outs = failed_outs;
        outs.reserve(updates.len());
        for u in updates {
            let Some(info) = self.seqs.get_mut(&u.seq_id) else {
                continue;
            };
            let first_token = u.num_output_tokens == u.new_tokens.len();
            let prompt_logprobs = (info.wants_prompt_logprobs
                && (first_token || u.finish.is_some())
                && !info.prompt_logprobs.is_empty())
            .then(|| std::mem::take(&mut info.prompt_logprobs));
            let mut logprobs = sampled_lps.remove(&u.seq_id).unwrap_or_default();
            // A stop inside an accepted run drops the tokens after it, and their logprobs.
            logprobs.truncate(u.new_tokens.len());
            let out = EngineOutput {
                request_id: info.request_id,
                index: info.index,
                new_token_ids: u.new_tokens,
                logprobs,
                prompt_logprobs,
                finish_reason: u.finish.clone(),
                num_prompt_tokens: u.prompt_len,
                num_cached_tokens: u.num_cached_tokens,
                timing: OutputTiming {
                    arrival: u.arrival,
                    first_scheduled: u.first_scheduled,
                    at: now,
                },
            };
            self.generation_tokens += out.new_token_ids.len() as u64;
            if u.finish.is_some() {
                self.forget(u.seq_id);
            }
            outs.push(out);
        }
        outs
    }

    pub fn stats(&self) -> EngineStats {
        let kv = self.scheduler.kv();
        EngineStats {
            num_running: self.scheduler.num_running(),
            num_waiting: self.scheduler.num_waiting(),
            kv_usage: kv.usage(),
            num_blocks: kv.pool().num_blocks(),
            kv_groups: kv
                .groups()
                .iter()
                .zip(kv.held_per_group())
                .map(|(g, &blocks)| KvGroupUsage {
                    sliding_window: g.sliding_window,
                    blocks,
                })
                .collect(),
            prompt_tokens: self.scheduler.counters.prompt_tokens_computed,
            generation_tokens: self.generation_tokens,
            prefix_queried_tokens: kv.stats.queried_tokens,
            prefix_hit_tokens: kv.stats.hit_tokens,
            preemptions: self.scheduler.counters.preemptions,
            context_shifts: self.scheduler.counters.context_shifts,
            steps: self.scheduler.counters.steps,
            peak_kv_slots: self.peak_kv.0,
            peak_kv_filled: self.peak_kv.1,
            spec: self.scheduler.speculation().map(|s| s.counters.clone()),
            running_loras: self.scheduler.lora_names(true),
            waiting_loras: self.scheduler.lora_names(false),
            kv_tier: kv.tier().filter(|t| t.takes_saves()).map(|t| t.stats()),
        }
    }
}
