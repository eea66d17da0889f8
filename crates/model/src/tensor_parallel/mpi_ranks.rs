//! Ranks that are processes: `mpirun -np N pagoda serve ... --tensor-parallel-size N (or
//! --pipeline-parallel-size N) --distributed-executor-backend mpi` starts N copies; rank 0
//! serves and runs the scheduler, the others (`run_worker`) load their shard (or stage) of the
//! same file and then run each job rank 0 broadcasts, meeting the others inside every step in
//! `MpiCollective` (tensor parallelism) or `MpiLink` (a pipeline). Rank 0 decides the split and
//! the KV cache's shape and sends them first, so every rank's cache matches whatever memory
//! its machine has.

use std::collections::{HashMap, HashSet};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use pagoda_gguf::GgufFile;
use pagoda_mpi::Mpi;

use super::frame::{FrameError, Reader, Writer};
use super::job::{Job, RankState, Reply, decode_reply, encode_reply};
use super::layout::RankPart;
use super::mpi_collective::MpiCollective;
use super::rank_setup::{KvShape, panic_message, rank_pool};
use super::role::{RankRole, TensorRoles};
use super::{TpCounters, TpError, affinity};
use crate::kv::cache::KvCache;
use crate::kv::groups::KvGroupPlan;
use crate::models::Model;
use crate::pipeline_parallel::{MpiLink, PipelineRoles, PpCounters};
use crate::{KvCacheDtype, ModelError};

/// How the job's ranks split the model.
pub(crate) enum Split {
    /// Tensor parallelism: heads, FFN columns and vocabulary rows.
    Tensor(Arc<TpCounters>),
    /// A pipeline: runs of layers, a step cut into `micro_batches` (`None`: the rule).
    Pipeline {
        counters: Arc<PpCounters>,
        micro_batches: Option<usize>,
    },
}

impl Split {
    /// The roles of the job's ranks, meeting over MPI.
    fn roles(&self, mpi: &'static Mpi) -> Arc<dyn RankRole> {
        match self {
            Self::Tensor(counters) => Arc::new(TensorRoles {
                comm: Arc::new(MpiCollective::new(mpi)),
                counters: Arc::clone(counters),
            }),
            Self::Pipeline {
                counters,
                micro_batches,
            } => Arc::new(PipelineRoles {
                link: Arc::new(MpiLink::new(mpi)),
                counters: Arc::clone(counters),
                micro_batches: *micro_batches,
            }),
        }
    }
}

/// Whether rank 0 has started the job's ranks (they serve one model, once).
static STARTED: AtomicBool = AtomicBool::new(false);

/// Rank 0's handle on ranks 1..N of the job.
pub(crate) struct MpiRanks {
    mpi: &'static Mpi,
    stopped: AtomicBool,
    /// Digests of the LoRA adapters the other ranks hold.
    held: Mutex<HashSet<u64>>,
}

/// Rank 0 of an MPI job, started: its own part, its handle on the others, their parts (rank
/// order, from rank 1) and the roles every rank plays.
pub(crate) struct Started {
    pub leader: Model,
    pub ranks: MpiRanks,
    pub parts: Vec<RankPart>,
    pub roles: Arc<dyn RankRole>,
}

/// The rank 0 of `size` processes: sends the KV shape, loads its own shard of `file`, and
/// collects the others' parts (a rank that failed to load names itself in the error).
pub(crate) fn start(
    file: Arc<GgufFile>,
    size: usize,
    kv: &KvShape,
    split: &Split,
    mpi: &'static Mpi,
) -> Result<Started, ModelError> {
    // The job's ranks load once: after the group stops (the model unloaded), they are gone.
    if STARTED.swap(true, Ordering::AcqRel) {
        return Err(TpError::Mpi(
            "the MPI job's ranks were stopped with the model they held; restart the job to load it again"
                .into(),
        )
        .into());
    }
    if mpi.size() != size || mpi.rank() != 0 {
        return Err(TpError::MpiSize {
            asked: size,
            launched: mpi.size(),
        }
        .into());
    }
    let mut setup = encode_setup(kv, split, size);
    mpi.broadcast(&mut setup, 0).map_err(mpi_failed)?;
    let roles = split.roles(mpi);
    let leader = roles.load(file, 0)?;
    let gathered = mpi
        .gather_bytes(&[], 0)
        .map_err(mpi_failed)?
        .unwrap_or_default();
    let mut parts = Vec::new();
    for (rank, bytes) in gathered.iter().enumerate().skip(1) {
        match decode_reply(bytes).map_err(|e| roles.failed(rank, e.to_string()))? {
            Ok(p) => parts.push(
                p.first()
                    .and_then(|b| decode_part(b).ok())
                    .ok_or_else(|| roles.failed(rank, "its part did not decode".into()))?,
            ),
            Err(message) => return Err(roles.failed(rank, message)),
        }
    }
    let ranks = MpiRanks {
        mpi,
        stopped: AtomicBool::new(false),
        held: Mutex::new(HashSet::new()),
    };
    Ok(Started {
        leader,
        ranks,
        parts,
        roles,
    })
}

impl MpiRanks {
    /// Sends `job` to every rank, runs `own` (rank 0's part) and collects the others'
    /// replies, in rank order. A rank that fails mid-step ends the whole job (the others wait
    /// for it inside MPI calls), so an error here is a rank's own report.
    pub(crate) fn run(
        &self,
        job: &Job,
        own: impl FnOnce() -> Result<(), String>,
    ) -> Result<Vec<Vec<Vec<u8>>>, (usize, String)> {
        if self.stopped.load(Ordering::Acquire) {
            return Err((0, "the parallel group has stopped".into()));
        }
        let mut frame = {
            let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
            job.encode(&mut |digest| !held.insert(digest))
        };
        self.mpi
            .broadcast(&mut frame, 0)
            .map_err(|e| (0, e.to_string()))?;
        if let Err(message) = own() {
            tracing::error!(rank = 0, %message, "parallel rank failed: ending the MPI job");
            self.mpi.abort(1);
        }
        if !job.has_reply() {
            return Ok(vec![Vec::new(); self.mpi.size().saturating_sub(1)]);
        }
        let gathered = self
            .mpi
            .gather_bytes(&[], 0)
            .map_err(|e| (0, e.to_string()))?
            .unwrap_or_default();
        let mut replies = Vec::with_capacity(gathered.len().saturating_sub(1));
        for (rank, bytes) in gathered.iter().enumerate().skip(1) {
            match decode_reply(bytes) {
                Ok(Ok(r)) => replies.push(r),
                Ok(Err(message)) => return Err((rank, message)),
                Err(e) => return Err((rank, e.to_string())),
            }
        }
        Ok(replies)
    }

    /// Test hook: every other rank panics in its next job (which ends the job).
    pub(crate) fn poison(&self, _rank: usize) {
        let _ = self
            .mpi
            .broadcast(&mut Job::Poison.encode(&mut |_| true), 0);
    }

    /// Tells the ranks to stop and shuts MPI down on this one; after this, steps fail.
    pub(crate) fn stop(&self) {
        if self.stopped.swap(true, Ordering::AcqRel) {
            return;
        }
        let _ = self.mpi.broadcast(&mut Job::Stop.encode(&mut |_| true), 0);
        if let Err(e) = self.mpi.finalize() {
            tracing::warn!(error = %e, "MPI did not shut down cleanly");
        }
    }
}

/// A rank above 0 of the job: loads its shard of the GGUF at `path` (the same file rank 0
/// serves, at the same path on every machine), then runs rank 0's jobs until it stops.
pub fn run_worker(path: &Path, mpi: &'static Mpi) -> Result<(), ModelError> {
    let rank = mpi.rank();
    // mpirun forwards a Ctrl-C or SIGTERM to every rank; rank 0 drains its requests and then
    // stops the others, which must live until it does.
    // SAFETY: setting a signal's disposition to "ignore" has no handler to be unsafe in.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGTERM, libc::SIG_IGN);
    }
    let mut setup = Vec::new();
    mpi.broadcast(&mut setup, 0).map_err(mpi_failed)?;
    let loaded = load_worker(path, &setup, mpi);
    let part = match &loaded {
        Ok((state, part, _)) => {
            let _ = state;
            Ok(vec![encode_part(part)])
        }
        Err(e) => Err(e.to_string()),
    };
    mpi.gather_bytes(&encode_reply(&part), 0)
        .map_err(mpi_failed)?;
    let (mut state, part, threads) = loaded?;
    tracing::info!(rank, cpus = ?part.cpus, heads = ?part.heads, kv_heads = ?part.kv_heads, "MPI rank loaded; waiting for rank 0's steps");
    let pool = rank_pool(threads, &part.cpus);
    // The LoRA adapters rank 0 has sent, by digest (each comes once, with the first step that
    // uses it).
    let mut adapters = HashMap::new();
    loop {
        let mut frame = Vec::new();
        mpi.broadcast(&mut frame, 0).map_err(mpi_failed)?;
        let job = match Job::decode(&frame, &mut adapters) {
            Ok(job) => job,
            Err(e) => {
                tracing::error!(rank, error = %e, "ending the MPI job");
                mpi.abort(1);
            }
        };
        match job {
            Job::Stop => break,
            Job::Poison => {
                state.run(&job, &pool);
                continue;
            }
            _ => {}
        }
        let reply: Reply = match catch_unwind(AssertUnwindSafe(|| state.run(&job, &pool))) {
            Ok(payloads) => Ok(payloads),
            Err(p) => {
                let message = panic_message(p.as_ref());
                tracing::error!(rank, %message, "parallel rank failed: ending the MPI job");
                mpi.abort(1);
            }
        };
        if job.has_reply() {
            mpi.gather_bytes(&encode_reply(&reply), 0)
                .map_err(mpi_failed)?;
        }
    }
    mpi.finalize().map_err(mpi_failed)
}

/// This rank's shard and KV cache, as rank 0's `setup` frame shapes them.
fn load_worker(
    path: &Path,
    setup: &[u8],
    mpi: &'static Mpi,
) -> Result<(RankState, RankPart, Option<usize>), ModelError> {
    let (kv, split, size) = decode_setup(setup).map_err(|e| mpi_failed(e.to_string()))?;
    if size != mpi.size() {
        return Err(TpError::MpiSize {
            asked: size,
            launched: mpi.size(),
        }
        .into());
    }
    let file = Arc::new(GgufFile::open(path)?);
    let mut model = split.roles(mpi).load(file, mpi.rank())?;
    model.set_kv_cache_dtype(kv.dtype);
    let plan = if kv.grouped {
        KvGroupPlan::by_attention(model.full_config())
    } else {
        KvGroupPlan::single(model.full_config().n_layers)
    };
    let cache = KvCache::with_plan(
        model.config(),
        model.kv_plan(&plan),
        kv.num_blocks,
        kv.block_size,
    )?;
    let part = RankPart::of(&model, mpi.rank(), affinity::allowed_cpus());
    Ok((RankState::new(model, cache), part, kv.threads))
}

fn mpi_failed(e: impl ToString) -> ModelError {
    TpError::Mpi(e.to_string()).into()
}

/// The KV shape rank 0 chose, as a worker reads it.
struct WorkerKv {
    dtype: KvCacheDtype,
    grouped: bool,
    num_blocks: usize,
    block_size: usize,
    threads: Option<usize>,
}

/// `Split` in a setup frame: its kind, and a pipeline's micro-batches (0: the rule).
const TENSOR: u8 = 0;
const PIPELINE: u8 = 1;

fn encode_setup(kv: &KvShape, split: &Split, size: usize) -> Vec<u8> {
    let mut w = Writer(Vec::new());
    match split {
        Split::Tensor(_) => {
            w.u8(TENSOR);
            w.u64(0);
        }
        Split::Pipeline { micro_batches, .. } => {
            w.u8(PIPELINE);
            w.u64(micro_batches.unwrap_or(0) as u64);
        }
    }
    w.bytes(kv.dtype.name().as_bytes());
    w.u8(u8::from(kv.plan.num_groups() > 1));
    for v in [
        kv.num_blocks,
        kv.block_size,
        kv.threads_per_rank.unwrap_or(0),
        size,
    ] {
        w.u64(v as u64);
    }
    w.0
}

fn decode_setup(bytes: &[u8]) -> Result<(WorkerKv, Split, usize), FrameError> {
    let mut r = Reader(bytes);
    let (kind, micro_batches) = (r.u8()?, r.usize()?);
    let dtype = std::str::from_utf8(r.bytes()?)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or(FrameError("KV dtype"))?;
    let grouped = r.u8()? != 0;
    let (num_blocks, block_size, threads, size) = (r.usize()?, r.usize()?, r.usize()?, r.usize()?);
    r.end()?;
    let kv = WorkerKv {
        dtype,
        grouped,
        num_blocks,
        block_size,
        threads: (threads > 0).then_some(threads),
    };
    let split = match kind {
        TENSOR => Split::Tensor(Arc::default()),
        PIPELINE => Split::Pipeline {
            counters: Arc::new(PpCounters::new(size)),
            micro_batches: (micro_batches > 0).then_some(micro_batches),
        },
        _ => return Err(FrameError("split kind")),
    };
    Ok((kv, split, size))
}

fn encode_part(p: &RankPart) -> Vec<u8> {
    let mut w = Writer(Vec::new());
    w.u64(p.rank as u64);
    let cpus: Vec<u32> = p.cpus.iter().map(|&c| c as u32).collect();
    w.u32s(&cpus);
    let vocab = p.vocab.clone().unwrap_or(0..0);
    for r in [&p.layers, &p.heads, &p.kv_heads, &vocab] {
        w.u64(r.start as u64);
        w.u64(r.end as u64);
    }
    w.u8(u8::from(p.vocab.is_some()));
    w.u64(p.weight_bytes);
    w.0
}

fn decode_part(bytes: &[u8]) -> Result<RankPart, FrameError> {
    let mut r = Reader(bytes);
    let rank = r.usize()?;
    let cpus = r.u32s()?.into_iter().map(|c| c as usize).collect();
    let mut range = || -> Result<std::ops::Range<usize>, FrameError> { Ok(r.usize()?..r.usize()?) };
    let (layers, heads, kv_heads, vocab) = (range()?, range()?, range()?, range()?);
    let has_vocab = r.u8()? != 0;
    let weight_bytes = r.u64()?;
    r.end()?;
    Ok(RankPart {
        rank,
        cpus,
        layers,
        heads,
        kv_heads,
        vocab: has_vocab.then_some(vocab),
        weight_bytes,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_setup_and_a_part_survive_their_byte_form() {
        let kv = KvShape {
            dtype: KvCacheDtype::Int8,
            plan: KvGroupPlan::single(4),
            num_blocks: 300,
            block_size: 16,
            threads_per_rank: Some(3),
        };
        let tensor = Split::Tensor(Arc::default());
        let (w, split, size) = decode_setup(&encode_setup(&kv, &tensor, 2)).unwrap();
        let got = (
            w.dtype,
            w.grouped,
            w.num_blocks,
            w.block_size,
            w.threads,
            size,
        );
        assert_eq!(got, (KvCacheDtype::Int8, false, 300, 16, Some(3), 2));
        assert!(matches!(split, Split::Tensor(_)));
        let pipeline = Split::Pipeline {
            counters: Arc::new(PpCounters::new(2)),
            micro_batches: Some(4),
        };
        let (_, split, _) = decode_setup(&encode_setup(&kv, &pipeline, 2)).unwrap();
        let micro_batches = match split {
            Split::Pipeline { micro_batches, .. } => micro_batches,
            Split::Tensor(_) => None,
        };
        assert_eq!(micro_batches, Some(4));
        let part = RankPart {
            rank: 1,
            cpus: vec![1],
            layers: 0..30,
            heads: 3..6,
            kv_heads: 1..2,
            vocab: Some(100..200),
            weight_bytes: 12345,
        };
        assert_eq!(decode_part(&encode_part(&part)).unwrap(), part);
        assert!(decode_part(&encode_part(&part)[1..]).is_err());
    }
}
