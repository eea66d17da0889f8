//! Tensor parallelism: ranks are threads of one process (`group`) or processes of an MPI job
//! (`mpi_ranks`), each holding its part of the weights (`shard`: heads, FFN columns,
//! vocabulary rows) and its own KV cache, running the same step side by side and meeting in a
//! `Collective` twice per layer (the attention output's and the FFN's partial sums) and once
//! for the logits. Rank 0 is the engine thread.

pub mod affinity;
pub mod collective;
pub mod error;
pub(crate) mod frame;
pub mod group;
pub(crate) mod job;
pub(crate) mod kv_blocks;
pub mod layout;
pub mod mpi_collective;
pub(crate) mod mpi_ranks;
pub mod numa;
pub mod rank;
pub(crate) mod rank_setup;
pub mod role;
pub mod shard;
pub mod shared_memory;

use std::sync::Arc;

use pagoda_gguf::GgufFile;

pub use collective::{Collective, CollectiveError};
pub use error::TpError;
pub use group::RankGroup;
pub use layout::{RankLayout, RankPart};
pub use mpi_collective::MpiCollective;
pub use mpi_ranks::run_worker;
pub use rank::{TpCounters, TpRank};
pub use role::{RankRole, TensorRoles};
pub use shard::Shard;
pub use shared_memory::SharedMemoryCollective;

use crate::config::ModelConfig;

/// `--tensor-parallel-size` and the counters `/metrics` reads.
#[derive(Clone)]
pub struct TensorParallelConfig {
    /// Ranks (1: off).
    pub size: usize,
    pub counters: Arc<TpCounters>,
    /// The ranks are the processes of this MPI job (`None`: threads of this process).
    pub mpi: Option<&'static pagoda_mpi::Mpi>,
}

impl std::fmt::Debug for TensorParallelConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TensorParallelConfig")
            .field("size", &self.size)
            .field("mpi", &self.mpi.is_some())
            .finish_non_exhaustive()
    }
}

impl Default for TensorParallelConfig {
    fn default() -> Self {
        Self::new(1)
    }
}

impl TensorParallelConfig {
    pub fn new(size: usize) -> Self {
        Self {
            size,
            counters: Arc::default(),
            mpi: None,
        }
    }
}

impl PartialEq for TensorParallelConfig {
    fn eq(&self, other: &Self) -> bool {
        self.size == other.size && self.mpi.is_some() == other.mpi.is_some()
    }
}

impl Eq for TensorParallelConfig {}

/// The FFN's split unit: the largest quant block of any layer's `ffn_down` (split by input
/// columns, so each rank's part must be whole blocks), at least 8 (a packed group of gate and
/// up rows).
pub fn ffn_alignment(file: &GgufFile, c: &ModelConfig) -> usize {
    (0..c.n_layers)
        .filter_map(|il| file.tensor(&format!("blk.{il}.ffn_down.weight")))
        .map(|t| t.ty.block_size())
        .fold(8, usize::max)
}
