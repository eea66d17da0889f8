//! `CpuExecutor`: a model, the KV arena it writes into, and the scratch buffers of a forward
//! pass. One `forward` call runs one flat batch: the linear layers once over all T rows,
//! attention per request over its own blocks, the LM head only over `logits_indices`.

use std::sync::Arc;

use pagoda_gguf::GgufFile;

use crate::kv::shift::shift_blocks;
use crate::lora::{LoraAdapter, LoraShards};
use crate::models::{ForwardScratch, Model};
use crate::pipeline_parallel::{Mailboxes, PipelineParallelConfig, PipelineRoles};
use crate::tensor_parallel::kv_blocks::BlockSections;
use crate::tensor_parallel::mpi_ranks::{self, Split};
use crate::tensor_parallel::rank_setup::KvShape;
use crate::tensor_parallel::{
    RankGroup, RankLayout, RankPart, SharedMemoryCollective, TensorParallelConfig, TensorRoles,
    affinity,
};
use crate::{ForwardBatch, KvCache, KvGroupPlan, ModelError};

/// Runs forward passes of one model on the CPU. With tensor or pipeline parallelism it is
/// rank 0: its model and KV cache are rank 0's parts (a shard, or stage 0's layers), and
/// `group` runs the other ranks beside it.
pub struct CpuExecutor {
    pub model: Model,
    pub kv_cache: KvCache,
    scratch: ForwardScratch,
    group: Option<RankGroup>,
    /// Rank 0's parts of the adapters, with tensor parallelism.
    lora_parts: LoraShards,
}

impl CpuExecutor {
    /// An executor with a fresh arena of `num_blocks` blocks of `block_size` slots per layer.
    pub fn new(model: Model, num_blocks: usize, block_size: usize) -> Result<Self, ModelError> {
        let plan = KvGroupPlan::single(model.config().n_layers);
        Self::with_plan(model, plan, num_blocks, block_size)
    }

    /// An executor whose layers read the block tables `plan` assigns them.
    pub fn with_plan(
        model: Model,
        plan: KvGroupPlan,
        num_blocks: usize,
        block_size: usize,
    ) -> Result<Self, ModelError> {
        let kv_cache =
            KvCache::with_plan(model.config(), model.kv_plan(&plan), num_blocks, block_size)?;
        Ok(Self {
            model,
            kv_cache,
            scratch: ForwardScratch::default(),
            group: None,
            lora_parts: LoraShards::default(),
        })
    }

    /// Rank 0 of `tp.size` ranks over the file `model` was loaded from (`model` itself is
    /// dropped: every rank, this one included, loads its own part on its own thread).
    pub fn tensor_parallel(
        model: Model,
        tp: &TensorParallelConfig,
        threads_per_rank: Option<usize>,
        plan: KvGroupPlan,
        num_blocks: usize,
        block_size: usize,
    ) -> Result<Self, ModelError> {
        let blocks = (num_blocks, block_size);
        if let Some(mpi) = tp.mpi {
            let split = Split::Tensor(Arc::clone(&tp.counters));
            return Self::group_of_processes(
                model,
                (tp.size, split, mpi),
                threads_per_rank,
                plan,
                blocks,
            );
        }
        let roles = Arc::new(TensorRoles {
            comm: Arc::new(SharedMemoryCollective::new(tp.size)),
            counters: Arc::clone(&tp.counters),
        });
        Self::group(model, threads_per_rank, plan, blocks, |file, kv| {
            RankGroup::start(file, tp.size, kv, roles)
        })
    }

    /// Stage 0 of `pp.size` pipeline stages over the file `model` was loaded from (dropped,
    /// as with tensor parallelism).
    pub fn pipeline_parallel(
        model: Model,
        pp: &PipelineParallelConfig,
        threads_per_rank: Option<usize>,
        plan: KvGroupPlan,
        num_blocks: usize,
        block_size: usize,
    ) -> Result<Self, ModelError> {
        let blocks = (num_blocks, block_size);
        if let Some(mpi) = pp.mpi {
            let split = Split::Pipeline {
                counters: Arc::clone(&pp.counters),
                micro_batches: pp.micro_batches,
            };
            return Self::group_of_processes(
                model,
                (pp.size, split, mpi),
                threads_per_rank,
                plan,
                blocks,
            );
        }
        let roles = Arc::new(PipelineRoles {
            link: Arc::new(Mailboxes::new(pp.size)),
            counters: Arc::clone(&pp.counters),
            micro_batches: pp.micro_batches,
        });
        Self::group(model, threads_per_rank, plan, blocks, |file, kv| {
            RankGroup::start(file, pp.size, kv, roles)
        })
    }

    /// Rank 0 of an MPI job of `size` processes split as `split`.
    fn group_of_processes(
        model: Model,
        (size, split, mpi): (usize, Split, &'static pagoda_mpi::Mpi),
        threads_per_rank: Option<usize>,
        plan: KvGroupPlan,
        blocks: (usize, usize),
    ) -> Result<Self, ModelError> {
        Self::group(model, threads_per_rank, plan, blocks, |file, kv| {
            let s = mpi_ranks::start(file, size, &kv, &split, mpi)?;
            let threads = kv.threads_per_rank;
            let group = RankGroup::of_processes(&s.leader, s.ranks, s.parts, s.roles, threads);
            Ok((s.leader, group))
        })
    }

    /// Rank 0 of a group `start` starts over the file `model` was loaded from, each rank's
    /// KV cache of `plan` and `num_blocks` blocks; rank 0's part beside the group.
    fn group(
        model: Model,
        threads_per_rank: Option<usize>,
        plan: KvGroupPlan,
        (num_blocks, block_size): (usize, usize),
        start: impl FnOnce(Arc<GgufFile>, KvShape) -> Result<(Model, RankGroup), ModelError>,
    ) -> Result<Self, ModelError> {
        let (file, dtype) = (model.file_arc(), model.config().kv_cache_dtype);
        drop(model);
        let kv = KvShape {
            dtype,
            plan: plan.clone(),
            num_blocks,
            block_size,
            threads_per_rank,
        };
        let (mut leader, group) = start(file, kv)?;
        leader.set_kv_cache_dtype(dtype);
        let mut exec = Self::with_plan(leader, plan, num_blocks, block_size)?;
        exec.group = Some(group);
        Ok(exec)
    }

    /// The parallel group beside rank 0, when there is one.
    pub fn rank_group(&self) -> Option<&RankGroup> {
        self.group.as_ref()
    }

    /// Who holds what: the group's ranks, or this one process as one rank.
    pub fn layout(&self) -> RankLayout {
        let ranks = match &self.group {
            Some(g) => g.parts().to_vec(),
            None => vec![RankPart::of(&self.model, 0, affinity::allowed_cpus())],
        };
        let pp = self.model.stage().map_or(1, |s| s.size);
        RankLayout {
            tensor_parallel_size: if pp > 1 { 1 } else { ranks.len() },
            pipeline_parallel_size: pp,
            backend: match &self.group {
                Some(g) if g.across_processes() => "mpi",
                _ => "threads",
            },
            ranks,
        }
    }

    /// Validates `batch`, runs it, and returns the logits rows `[logits_indices.len()][vocab]`.
    pub fn forward(&mut self, batch: &ForwardBatch) -> Result<&[f32], ModelError> {
        self.forward_with_loras(batch, &[])
    }

    /// [`CpuExecutor::forward`] where `batch.seq_loras` picks each sequence's adapter from
    /// `adapters` (each checked to fit this model).
    pub fn forward_with_loras(
        &mut self,
        batch: &ForwardBatch,
        adapters: &[Arc<LoraAdapter>],
    ) -> Result<&[f32], ModelError> {
        let c = self.model.config();
        batch.validate(
            c.vocab_size,
            self.kv_cache.num_blocks(),
            self.kv_cache.block_size(),
            self.kv_cache.plan().groups(),
        )?;
        if let Some(i) = batch
            .seq_loras
            .iter()
            .flatten()
            .find(|&&i| i as usize >= adapters.len())
        {
            return Err(ModelError::InvalidBatch(format!(
                "seq_loras names adapter {i} of {}",
                adapters.len()
            )));
        }
        if let Some(i) = adapters
            .iter()
            .position(|a| !a.fits(self.model.full_config()))
        {
            return Err(ModelError::InvalidBatch(format!(
                "adapter {i} was built for another model shape"
            )));
        }
        let Some(group) = &mut self.group else {
            return Ok(self
                .model
                .forward(batch, adapters, &mut self.kv_cache, &mut self.scratch));
        };
        // Every rank adds its part of each adapter, as it multiplies by its part of the base.
        let own = self
            .lora_parts
            .of(adapters, self.model.shard(), self.model.full_config());
        let (model, kv, scratch) = (&self.model, &mut self.kv_cache, &mut self.scratch);
        group.step(batch, adapters, || {
            model.forward(batch, &own, kv, scratch);
        })?;
        let n = batch.logits_indices.len() * c.vocab_size;
        Ok(&self.scratch.logits[..n])
    }

    /// A context shift: each `(src, dst)` block copied with its keys rotated back by `delta`
    /// positions, in every rank's cache.
    pub fn shift_kv(&mut self, copies: &[(u32, u32)], delta: u32) -> Result<(), ModelError> {
        let (model, kv) = (&self.model, &mut self.kv_cache);
        match &mut self.group {
            None => {
                shift_blocks(kv, model, copies, delta);
                Ok(())
            }
            Some(group) => group.shift(copies, delta, || shift_blocks(kv, model, copies, delta)),
        }
    }

    /// Blocks `ids` as whole payloads (every KV head's, as one process stores them; an empty
    /// payload for a block out of range), for the disk tier and KV transfers.
    pub fn read_blocks(&mut self, ids: &[u32]) -> Result<Vec<Vec<u8>>, ModelError> {
        let kv = &self.kv_cache;
        let own = || ids.iter().map(|&b| kv.read_payload(b)).collect::<Vec<_>>();
        match &mut self.group {
            None => Ok(own()),
            Some(group) => group.read_blocks(ids, &BlockSections::of(kv), own),
        }
    }

    /// Writes whole payloads (as [`CpuExecutor::read_blocks`] gives them) into their blocks:
    /// whether each was written (its length is this model's payload's, its block in range).
    pub fn write_blocks(&mut self, blocks: Vec<(u32, Vec<u8>)>) -> Result<Vec<bool>, ModelError> {
        let (heads, mine) = (
            self.model.full_config().n_kv_heads,
            self.model.shard().kv_heads.clone(),
        );
        let kv = &mut self.kv_cache;
        let Some(group) = &mut self.group else {
            return Ok(blocks.iter().map(|(b, p)| kv.write_block(*b, p)).collect());
        };
        let sections = BlockSections::of(kv);
        group.write_blocks(blocks, |blocks| {
            blocks
                .iter()
                .map(|(b, whole)| {
                    sections
                        .part(whole, heads, &mine)
                        .is_some_and(|p| kv.write_block(*b, &p))
                })
                .collect()
        })
    }

    /// A one-block cache of the whole model's KV heads (rank 0's own when the model is not
    /// split): the shape whole payloads have, which the disk tier's and transfers' payload
    /// length and layout digest describe.
    pub fn whole_kv_shape(&self) -> Result<KvCache, ModelError> {
        let kv = &self.kv_cache;
        let mut full = self.model.full_config().clone();
        full.kv_cache_dtype = kv.dtype();
        KvCache::with_plan(&full, kv.plan().clone(), 1, kv.block_size())
    }

    pub fn vocab_size(&self) -> usize {
        self.model.config().vocab_size
    }
}
