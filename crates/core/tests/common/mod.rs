//! A fake executor that behaves like the real runner where the core can observe it: it keeps
//! each sequence's tokens from the diffs, "computes" KV by writing (token, position) into a
//! simulated arena through the block table, and before each chunk checks that every earlier
//! position's slot holds the right token, so a wrong block table or a bad prefix hit fails loudly.

#![allow(dead_code, clippy::unwrap_used)]

use std::collections::HashMap;
use std::sync::Mutex;

use pagoda_core::kv::{BlockHash, KvTier, KvTierStats, LoadTicket};

use pagoda_core::kv::KvGroup;
use pagoda_core::{
    CacheConfig, EngineCore, EngineRequest, ExecutorError, ExecutorOutput, ModelExecutor,
    SampledToken, SamplingParams, SchedulerConfig, SchedulerOutput, SeqId,
};

pub const VOCAB: u32 = 1000;
pub const EOS: u32 = 999;

#[derive(Default)]
pub struct FakeExecutor {
    pub block_size: usize,
    /// Each KV group's window (`None`: full attention); one full group by default.
    pub windows: Vec<Option<usize>>,
    /// slot -> (token, position) last written there.
    pub arena: Vec<Option<(u32, usize)>>,
    /// Per sequence: tokens, and one block table per group.
    seqs: HashMap<SeqId, (Vec<u32>, Vec<Vec<u32>>)>,
    pub steps: Vec<SchedulerOutput>,
    /// Time each step takes, to model a real forward pass.
    pub step_delay: Option<std::time::Duration>,
    /// With speculation: one in `wrong_every` proposed tokens is wrong (0 = all right), and
    /// proposals are cut short at random, so acceptance, rejection and partial proposals all
    /// happen.
    pub wrong_every: u32,
    /// A lower KV tier whose "files" are copies of the arena's slots.
    pub tier: Option<std::sync::Arc<FakeTier>>,
}

/// Slot contents of one block.
type Slots = Vec<Option<(u32, usize)>>;
/// A read's state: finished, and the blocks read (in key order, up to the first missing one).
type Read = (bool, Vec<(BlockHash, Slots)>);

/// A lower KV tier in memory: saved blocks are their slots' (token, position) contents, a
/// read finishes at the second poll (so sequences really wait in the loading state), and
/// `forget_every` loses some saved blocks, so reads also stop short.
#[derive(Debug, Default)]
pub struct FakeTier {
    store: Mutex<HashMap<BlockHash, Slots>>,
    reads: Mutex<HashMap<LoadTicket, Read>>,
    pending: Mutex<HashMap<LoadTicket, Vec<BlockHash>>>,
    next: Mutex<LoadTicket>,
    pub forget_every: u8,
    /// Blocks installed from the tier so far.
    pub installed: Mutex<u64>,
    /// Transfer ids still expected (prefill/decode disaggregation).
    pub awaited: Mutex<std::collections::HashSet<String>>,
}

impl KvTier for FakeTier {
    fn enabled(&self) -> bool {
        true
    }
    fn contains(&self, key: &BlockHash) -> bool {
        self.store.lock().unwrap().contains_key(key)
    }
    fn worth_reading(&self, _blocks: usize, _tokens: usize) -> bool {
        true
    }
    fn prefetch(&self, keys: Vec<BlockHash>) -> LoadTicket {
        let mut n = self.next.lock().unwrap();
        *n += 1;
        self.pending.lock().unwrap().insert(*n, keys);
        *n
    }
    fn poll(&self, ticket: LoadTicket) -> Option<usize> {
        if let Some(keys) = self.pending.lock().unwrap().remove(&ticket) {
            // First poll: the "read" happens now and is reported done at the next one.
            let store = self.store.lock().unwrap();
            let got: Vec<_> = keys
                .iter()
                .map_while(|k| Some((*k, store.get(k)?.clone())))
                .collect();
            self.reads.lock().unwrap().insert(ticket, (false, got));
            return None;
        }
        let mut reads = self.reads.lock().unwrap();
        match reads.get_mut(&ticket) {
            Some(r) => {
                r.0 = true;
                Some(r.1.len())
            }
            None => Some(0),
        }
    }
    fn cancel(&self, ticket: LoadTicket) {
        self.pending.lock().unwrap().remove(&ticket);
        self.reads.lock().unwrap().remove(&ticket);
    }
    fn stats(&self) -> KvTierStats {
        KvTierStats::default()
    }
    fn record_lookup(&self, _hit: usize, _miss: usize) {}
    fn awaiting(&self, id: &str) -> bool {
        self.awaited.lock().unwrap().contains(id)
    }
}

impl FakeTier {
    /// A tier that loses the blocks whose key's first byte is a multiple of `forget_every`
    /// (0: loses none).
    pub fn new(forget_every: u8) -> Self {
        Self {
            forget_every,
            ..Self::default()
        }
    }

    fn save(&self, key: BlockHash, slots: Slots) {
        if self.forget_every > 0 && key.0[0].is_multiple_of(self.forget_every) {
            return;
        }
        self.store.lock().unwrap().insert(key, slots);
    }

    /// The slots read for `key` by `ticket` (which must have finished).
    fn read(&self, ticket: LoadTicket, key: &BlockHash) -> Option<Slots> {
        let reads = self.reads.lock().unwrap();
        let (done, blocks) = reads.get(&ticket)?;
        assert!(*done, "a read installed before it finished");
        blocks
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, s)| s.clone())
    }
}

impl FakeExecutor {
    pub fn new(num_blocks: usize, block_size: usize) -> Self {
        Self {
            block_size,
            windows: vec![None],
            arena: vec![None; num_blocks * block_size],
            ..Default::default()
        }
    }

    pub fn next_token(tokens: &[u32]) -> u32 {
        let last = *tokens.last().unwrap();
        (last.wrapping_mul(31).wrapping_add(tokens.len() as u32 * 7)) % (VOCAB - 1)
    }
}

impl ModelExecutor for FakeExecutor {
    fn execute(&mut self, step: &SchedulerOutput) -> Result<ExecutorOutput, ExecutorError> {
        if let Some(d) = self.step_delay {
            std::thread::sleep(d);
        }
        self.steps.push(step.clone());
        let bs = self.block_size;
        if let Some(tier) = &self.tier {
            // Saves before loads, both before any KV is written: as the real runner does.
            for &(b, key) in &step.kv_saves {
                let b = b as usize;
                tier.save(key, self.arena[b * bs..(b + 1) * bs].to_vec());
            }
            for load in &step.kv_loads {
                let slots = tier
                    .read(load.ticket, &load.key)
                    .expect("installed a block not read");
                let b = load.block_id as usize;
                self.arena[b * bs..(b + 1) * bs].clone_from_slice(&slots);
                *tier.installed.lock().unwrap() += 1;
            }
        } else {
            assert!(step.kv_saves.is_empty() && step.kv_loads.is_empty());
        }
        for id in &step.finished_seq_ids {
            self.seqs.remove(id);
        }
        let mut out = ExecutorOutput::default();
        for s in &step.scheduled {
            if let Some(new) = &s.new {
                self.seqs.insert(
                    s.seq_id,
                    (new.prompt_token_ids.clone(), s.block_ids.clone()),
                );
            } else {
                let st = self
                    .seqs
                    .get_mut(&s.seq_id)
                    .ok_or_else(|| ExecutorError(format!("unknown seq {}", s.seq_id)))?;
                if s.resumed {
                    st.1.clone_from(&s.block_ids);
                } else {
                    for (t, ids) in st.1.iter_mut().zip(&s.block_ids) {
                        t.truncate(s.table_offset);
                        t.extend_from_slice(ids);
                    }
                }
            }
            // Proposals: the true continuation, with some tokens wrong and some runs short.
            let known = s.num_scheduled_tokens - s.num_spec_tokens;
            let mut proposed = Vec::new();
            if s.num_spec_tokens > 0 {
                let mut t = self.seqs[&s.seq_id].0.clone();
                let h = (s.seq_id as u32).wrapping_mul(2654435761) ^ (t.len() as u32 * 40503);
                let len = if h.is_multiple_of(3) {
                    s.num_spec_tokens / 2
                } else {
                    s.num_spec_tokens
                };
                for i in 0..len {
                    let right = Self::next_token(&t);
                    let wrong = self.wrong_every > 0
                        && (h >> 3)
                            .wrapping_add(i as u32 * 7)
                            .is_multiple_of(self.wrong_every);
                    let d = if wrong {
                        (right + 1) % (VOCAB - 1)
                    } else {
                        right
                    };
                    proposed.push(d);
                    t.push(d);
                }
            }
            let (tokens, tables) = &self.seqs[&s.seq_id];
            let (start, end) = (s.num_computed_tokens, s.num_computed_tokens + known);
            assert!(end <= tokens.len(), "scheduled past the known tokens");
            assert!(
                s.num_spec_tokens == 0 || end == tokens.len(),
                "speculation only after the last known token"
            );
            assert_eq!(tables.len(), self.windows.len(), "one table per group");
            for (table, window) in tables.iter().zip(&self.windows) {
                assert!(
                    table.len() * bs >= end + proposed.len(),
                    "block table too short"
                );
                // Every key the chunk's first query sees must hold its token: all earlier ones
                // for full attention, the last `window` for a sliding group.
                let lo = window.map_or(0, |w| (start + 1).saturating_sub(w));
                for (pos, tok) in tokens.iter().enumerate().take(start).skip(lo) {
                    let slot = table[pos / bs] as usize * bs + pos % bs;
                    assert_eq!(
                        self.arena[slot],
                        Some((*tok, pos)),
                        "seq {} position {pos}: cached KV is not its token",
                        s.seq_id
                    );
                }
                for pos in start..end {
                    let slot = table[pos / bs] as usize * bs + pos % bs;
                    self.arena[slot] = Some((tokens[pos], pos));
                }
                // Proposed tokens get KV too, right or wrong: the core must not count a
                // rejected one as computed (the check above would catch it a step later).
                for (i, &d) in proposed.iter().enumerate() {
                    let pos = end + i;
                    let slot = table[pos / bs] as usize * bs + pos % bs;
                    self.arena[slot] = Some((d, pos));
                }
            }
            if end == tokens.len() {
                let st = self.seqs.get_mut(&s.seq_id).unwrap();
                let mut all_accepted = true;
                for &d in &proposed {
                    let t = Self::next_token(&st.0);
                    st.0.push(t);
                    out.sampled.push(SampledToken {
                        seq_id: s.seq_id,
                        token_id: t,
                        logprobs: None,
                    });
                    if t != d {
                        all_accepted = false;
                        break;
                    }
                }
                if all_accepted {
                    // Every proposal accepted (or none made): the target's own next token.
                    let t = Self::next_token(&st.0);
                    st.0.push(t);
                    out.sampled.push(SampledToken {
                        seq_id: s.seq_id,
                        token_id: t,
                        logprobs: None,
                    });
                }
                if s.num_spec_tokens > 0 {
                    out.proposed.push((s.seq_id, proposed.len()));
                }
            }
        }
        Ok(out)
    }
}

pub fn engine(
    num_blocks: usize,
    block_size: usize,
    sched: SchedulerConfig,
    caching: bool,
) -> EngineCore<FakeExecutor> {
    engine_with_groups(num_blocks, block_size, sched, caching, vec![KvGroup::FULL])
}

/// An engine whose KV is split into `groups` (full attention and sliding windows).
pub fn engine_with_groups(
    num_blocks: usize,
    block_size: usize,
    sched: SchedulerConfig,
    caching: bool,
    groups: Vec<KvGroup>,
) -> EngineCore<FakeExecutor> {
    let mut exec = FakeExecutor::new(num_blocks, block_size);
    exec.windows = groups.iter().map(|g| g.sliding_window).collect();
    let cache = CacheConfig {
        block_size,
        num_blocks,
        enable_prefix_caching: caching,
        groups,
        hash_seed: "0".into(),
    };
    EngineCore::new(exec, sched, &cache, vec![EOS], VOCAB as usize)
}

pub fn request(id: u64, prompt: Vec<u32>, max_tokens: u32) -> EngineRequest {
    EngineRequest {
        id,
        prompt_token_ids: prompt,
        params: SamplingParams {
            max_tokens,
            ignore_eos: true,
            ..SamplingParams::greedy(max_tokens)
        },
        priority: 0,
        tenant: Default::default(),
        extra_keys: Default::default(),
    }
}

/// Runs until idle; returns each request's generated tokens.
pub fn run_to_end(core: &mut EngineCore<FakeExecutor>) -> HashMap<u64, Vec<u32>> {
    let mut out: HashMap<u64, Vec<u32>> = HashMap::new();
    let mut guard = 0;
    while core.has_work() {
        for o in core.step() {
            out.entry(o.request_id).or_default().extend(o.new_token_ids);
        }
        guard += 1;
        assert!(guard < 100_000, "engine did not finish");
    }
    out
}

/// The tokens the fake model generates for `prompt`.
pub fn expected(prompt: &[u32], n: usize) -> Vec<u32> {
    let mut t = prompt.to_vec();
    for _ in 0..n {
        t.push(FakeExecutor::next_token(&t));
    }
    t[prompt.len()..].to_vec()
}
