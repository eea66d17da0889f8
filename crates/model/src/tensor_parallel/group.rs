//! `RankGroup`: the threads of ranks 1..N, each pinned to its CPUs, holding its part of the
//! model (a tensor-parallel shard or a pipeline stage: `RankRole`) and its KV cache, waiting
//! for rank 0 (the engine thread) to hand it each step's batch. Every rank's kernels run inline
//! on its own thread. A panic on any rank aborts the group's waits so no rank waits forever,
//! and the group then fails every later step: the engine reports the error instead of hanging.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, TryRecvError, channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use pagoda_gguf::GgufFile;
use pagoda_kernels::parallel::RankPool;

use super::job::{Job, RankState, Reply};
use super::kv_blocks::BlockSections;
use super::layout::RankPart;
use super::mpi_ranks::MpiRanks;
use super::rank_setup::{KvShape, panic_message, rank_pool};
use super::role::RankRole;
use super::{affinity, numa};
use crate::ModelError;
use crate::kv::cache::KvCache;
use crate::lora::LoraAdapter;
use crate::models::Model;
use crate::runner::batch::ForwardBatch;

/// How long a rank spins for the next message before it blocks: decode steps follow each
/// other within a millisecond, and a futex wake-up at each step's start would keep every
/// other rank waiting at the first all-reduce (the kernel pool spins for the same reason).
pub(crate) const SPIN_TIME: Duration = Duration::from_micros(500);

/// The next message on `rx`, spinning briefly before blocking; `None` once its sender is gone.
fn receive<T>(rx: &Receiver<T>) -> Option<T> {
    let start = Instant::now();
    while start.elapsed() < SPIN_TIME {
        match rx.try_recv() {
            Ok(v) => return Some(v),
            Err(TryRecvError::Empty) => std::hint::spin_loop(),
            Err(TryRecvError::Disconnected) => return None,
        }
    }
    rx.recv().ok()
}

struct Worker {
    rank: usize,
    jobs: Option<Sender<Job>>,
    done: Receiver<Reply>,
    thread: Option<JoinHandle<()>>,
}

/// Ranks 1..N of a tensor-parallel group, as seen from rank 0: threads of this process
/// (`workers`), or processes started by `mpirun` (`remote`).
pub struct RankGroup {
    workers: Vec<Worker>,
    remote: Option<MpiRanks>,
    roles: Arc<dyn RankRole>,
    /// Rank 0's CPUs: the engine thread pins itself to them at its first step.
    leader_cpus: Vec<usize>,
    leader_pinned: bool,
    /// Set once a rank failed (its rank and message): every later step fails with it.
    failed: Option<(usize, String)>,
    /// Rank 0's kernel pool (the engine thread runs its part of each step on it).
    leader_pool: RankPool,
    /// Every rank's part, rank 0's included, in rank order.
    parts: Vec<RankPart>,
}

impl RankGroup {
    /// Loads every rank's part of the model in `file` as `roles` says, each on a thread
    /// pinned to its share of the CPUs (so its weights are first touched there), and starts
    /// ranks 1..N. Returns rank 0's model (its thread ends) and the group.
    pub fn start(
        file: Arc<GgufFile>,
        size: usize,
        kv: KvShape,
        roles: Arc<dyn RankRole>,
    ) -> Result<(Model, Self), ModelError> {
        let cpus = affinity::allowed_cpus();
        let nodes = numa::read_nodes(std::path::Path::new("/sys/devices/system/node"), &cpus);
        let rank_cpus = numa::rank_cpus(&cpus, &nodes, size);
        let kv = Arc::new(kv);
        let (leader_tx, leader_rx) = channel();
        let (part_tx, part_rx) = channel();
        let mut workers = Vec::new();
        let mut ready = Vec::new();
        for rank in 0..size {
            let rank_cpus = rank_cpus[rank].clone();
            let (file, kv, role) = (Arc::clone(&file), Arc::clone(&kv), Arc::clone(&roles));
            let (jobs_tx, jobs_rx) = channel();
            let (done_tx, done_rx) = channel();
            let (leader_tx, part_tx) = (leader_tx.clone(), part_tx.clone());
            let spawned = std::thread::Builder::new()
                .name(format!("pagoda-{}-rank-{rank}", roles.name()))
                .spawn(move || {
                    let pinned = affinity::pin_current_thread(&rank_cpus);
                    tracing::info!(rank, cpus = ?rank_cpus, pinned, kind = role.name(), "parallel rank loading");
                    let model = role.load(file, rank);
                    if rank == 0 {
                        let _ = leader_tx.send(model);
                        return;
                    }
                    let pool = rank_pool(kv.threads_per_rank, &rank_cpus);
                    let exec = model.and_then(|mut m| {
                        let _ = part_tx.send(RankPart::of(&m, rank, rank_cpus));
                        m.set_kv_cache_dtype(kv.dtype);
                        let cache = KvCache::with_plan(
                            m.config(),
                            m.kv_plan(&kv.plan),
                            kv.num_blocks,
                            kv.block_size,
                        )?;
                        Ok((m, cache))
                    });
                    match exec {
                        Ok(exec) => {
                            let _ = done_tx.send(Ok(Vec::new()));
                            serve(exec, &pool, role.as_ref(), &jobs_rx, &done_tx);
                        }
                        Err(e) => {
                            let _ = done_tx.send(Err(e.to_string()));
                        }
                    }
                })
                .map_err(|e| roles.failed(rank, format!("cannot start its thread: {e}")))?;
            if rank == 0 {
                ready.push(spawned);
                continue;
            }
            workers.push(Worker {
                rank,
                jobs: Some(jobs_tx),
                done: done_rx,
                thread: Some(spawned),
            });
        }
        drop((leader_tx, part_tx));
        let mut group = Self {
            workers,
            remote: None,
            roles: Arc::clone(&roles),
            leader_pinned: false,
            failed: None,
            leader_pool: rank_pool(kv.threads_per_rank, &rank_cpus[0]),
            leader_cpus: rank_cpus[0].clone(),
            parts: Vec::new(),
        };
        let leader = leader_rx
            .recv()
            .map_err(|_| roles.failed(0, "its loading thread ended".into()));
        for h in ready {
            let _ = h.join();
        }
        let leader = leader??;
        for w in &group.workers {
            match w.done.recv() {
                Ok(Ok(_)) => {}
                Ok(Err(message)) => return Err(roles.failed(w.rank, message)),
                Err(_) => {
                    return Err(roles.failed(w.rank, "its thread ended while loading".into()));
                }
            }
        }
        group
            .parts
            .push(RankPart::of(&leader, 0, group.leader_cpus.clone()));
        group.parts.extend(part_rx.try_iter());
        group.parts.sort_by_key(|p| p.rank);
        Ok((leader, group))
    }

    /// Rank 0 of ranks that are the processes of an MPI job: `remote` has loaded their parts,
    /// `leader` is this process's (rank 0's) part, pinned to `cpus`.
    pub(crate) fn of_processes(
        leader: &Model,
        remote: MpiRanks,
        mut parts: Vec<RankPart>,
        roles: Arc<dyn RankRole>,
        threads: Option<usize>,
    ) -> Self {
        let cpus = affinity::allowed_cpus();
        parts.insert(0, RankPart::of(leader, 0, cpus.clone()));
        Self {
            workers: Vec::new(),
            remote: Some(remote),
            roles,
            leader_pinned: false,
            failed: None,
            leader_pool: rank_pool(threads, &cpus),
            leader_cpus: cpus,
            parts,
        }
    }

    /// Ranks, rank 0 included.
    pub fn size(&self) -> usize {
        self.parts.len()
    }

    /// Whether the other ranks are processes (MPI) rather than threads of this one.
    pub fn across_processes(&self) -> bool {
        self.remote.is_some()
    }

    /// Every rank's part, in rank order.
    pub fn parts(&self) -> &[RankPart] {
        &self.parts
    }

    /// Runs one step: hands `batch` to every other rank, runs `own` (rank 0's forward pass,
    /// kernels on rank 0's pool) and waits for all. A failure on any rank fails this step and every
    /// later one.
    pub fn step(
        &mut self,
        batch: &ForwardBatch,
        adapters: &[Arc<LoraAdapter>],
        own: impl FnOnce(),
    ) -> Result<(), ModelError> {
        self.broadcast(Job::Step(Arc::new(batch.clone()), adapters.into()), own)
            .map(drop)
    }

    /// A context shift on every rank's cache: `own` is rank 0's.
    pub fn shift(
        &mut self,
        copies: &[(u32, u32)],
        delta: u32,
        own: impl FnOnce(),
    ) -> Result<(), ModelError> {
        self.broadcast(Job::Shift(copies.into(), delta), own)
            .map(drop)
    }

    /// Blocks `ids` as whole payloads: every rank's part (rank 0's from `own`) merged in head
    /// order (an empty payload for a block a rank could not read).
    pub(crate) fn read_blocks(
        &mut self,
        ids: &[u32],
        sections: &BlockSections,
        own: impl FnOnce() -> Vec<Vec<u8>>,
    ) -> Result<Vec<Vec<u8>>, ModelError> {
        let mut mine = Vec::new();
        let replies = self.broadcast(Job::ReadBlocks(ids.into()), || mine = own())?;
        let heads = |rank: usize| self.parts[rank].kv_heads.clone();
        Ok((0..ids.len())
            .map(|i| {
                let parts: Vec<_> = std::iter::once((heads(0), take(&mut mine, i)))
                    .chain(
                        replies
                            .iter()
                            .enumerate()
                            .map(|(w, r)| (heads(w + 1), r.get(i).cloned().unwrap_or_default())),
                    )
                    .collect();
                sections.merge(&parts).unwrap_or_default()
            })
            .collect())
    }

    /// Writes whole payloads: each rank its KV heads' part (rank 0's by `own`). Whether every
    /// rank wrote each block.
    pub(crate) fn write_blocks(
        &mut self,
        blocks: Vec<(u32, Vec<u8>)>,
        own: impl FnOnce(&[(u32, Vec<u8>)]) -> Vec<bool>,
    ) -> Result<Vec<bool>, ModelError> {
        let blocks: Arc<[(u32, Vec<u8>)]> = blocks.into();
        let mut mine = Vec::new();
        let replies = self.broadcast(Job::WriteBlocks(Arc::clone(&blocks)), || {
            mine = own(&blocks);
        })?;
        Ok((0..blocks.len())
            .map(|i| {
                mine.get(i) == Some(&true) && replies.iter().all(|r| r.get(i) == Some(&vec![1]))
            })
            .collect())
    }

    /// Hands each worker `job`, runs `own` on rank 0 and waits for all: the workers' replies,
    /// in rank order.
    fn broadcast(&mut self, job: Job, own: impl FnOnce()) -> Result<Vec<Vec<Vec<u8>>>, ModelError> {
        if let Some((rank, message)) = &self.failed {
            return Err(self.roles.failed(*rank, message.clone()));
        }
        if !self.leader_pinned {
            self.leader_pinned = true;
            affinity::pin_current_thread(&self.leader_cpus);
        }
        if let Some(remote) = &self.remote {
            let pool = &self.leader_pool;
            let ran = remote.run(&job, || {
                catch_unwind(AssertUnwindSafe(|| pool.install(own)))
                    .map_err(|p| panic_message(p.as_ref()))
            });
            return ran.map_err(|(rank, message)| self.fail(rank, message));
        }
        let mut failure = None;
        for w in &self.workers {
            let sent = w.jobs.as_ref().is_some_and(|j| j.send(job.share()).is_ok());
            if !sent {
                failure.get_or_insert((w.rank, "its thread has ended".to_string()));
            }
        }
        if failure.is_some() {
            // A rank that did not get the step would leave the others waiting in it.
            self.roles.abort();
        }
        let own = catch_unwind(AssertUnwindSafe(|| self.leader_pool.install(own)));
        let own_failure = own.err().map(|p| {
            self.roles.abort();
            (0, panic_message(p.as_ref()))
        });
        let mut replies = Vec::with_capacity(self.workers.len());
        for w in &self.workers {
            let got = receive(&w.done).unwrap_or_else(|| Err("its thread has ended".to_string()));
            match got {
                Ok(reply) => replies.push(reply),
                Err(message) => {
                    failure.get_or_insert((w.rank, message));
                }
            }
        }
        // A worker's own error is the cause; rank 0 then only saw the aborted collective.
        if let Some((rank, message)) = failure.or(own_failure) {
            return Err(self.fail(rank, message));
        }
        Ok(replies)
    }

    /// Rank `rank` failed: this step's error, and every later step's.
    fn fail(&mut self, rank: usize, message: String) -> ModelError {
        tracing::error!(rank, %message, kind = self.roles.name(), "parallel rank failed; the group is stopped");
        self.failed = Some((rank, message.clone()));
        self.roles.failed(rank, message)
    }

    /// Test hook: rank `rank` panics in its next step.
    #[doc(hidden)]
    pub fn poison(&self, rank: usize) {
        if let Some(remote) = &self.remote {
            remote.poison(rank);
            return;
        }
        if let Some(j) = self
            .workers
            .iter()
            .find(|w| w.rank == rank)
            .and_then(|w| w.jobs.as_ref())
        {
            let _ = j.send(Job::Poison);
        }
    }
}

impl Drop for RankGroup {
    fn drop(&mut self) {
        if let Some(remote) = &self.remote {
            // Aborting would end the MPI job with an error: the ranks are told to stop.
            remote.stop();
            return;
        }
        self.roles.abort();
        for w in &mut self.workers {
            w.jobs = None; // the worker's `recv` ends
        }
        for w in &mut self.workers {
            if let Some(t) = w.thread.take() {
                let _ = t.join();
            }
        }
    }
}

/// A worker rank's loop: each job run on its part of the model and KV cache (kernels on its
/// `pool`), its outcome reported. A step's results reached rank 0 inside the pass (gathered
/// logits, or the last pipeline stage's).
fn serve(
    (model, kv): (Model, KvCache),
    pool: &RankPool,
    role: &dyn RankRole,
    jobs: &Receiver<Job>,
    done: &Sender<Reply>,
) {
    let mut state = RankState::new(model, kv);
    while let Some(job) = receive(jobs) {
        match job {
            Job::Stop => return,
            Job::Poison => {
                state.run(&job, pool);
                continue;
            }
            _ => {}
        }
        let ran = catch_unwind(AssertUnwindSafe(|| state.run(&job, pool)));
        let outcome = ran.map_err(|p| {
            role.abort();
            panic_message(p.as_ref())
        });
        if done.send(outcome).is_err() {
            return;
        }
    }
}

/// `v[i]`, taken (empty if missing).
fn take(v: &mut [Vec<u8>], i: usize) -> Vec<u8> {
    v.get_mut(i).map(std::mem::take).unwrap_or_default()
}
