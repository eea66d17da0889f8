//! Pipeline parallelism: ranks are threads (the `RankGroup` of tensor parallelism, with
//! `PipelineRoles`) or the processes of an MPI job (`MpiLink`), each stage holding a contiguous run of layers and only
//! their KV cache. A step's batch is cut into micro-batches that flow stage to stage as the
//! residual stream (`tokens x hidden` f32), so stage 1 runs micro-batch 0 while stage 0 runs
//! micro-batch 1; the last stage sends the logits back to rank 0, the engine thread.

pub mod counters;
pub mod error;
pub mod mailboxes;
pub mod micro_batch;
pub mod mpi_link;
pub mod roles;
pub mod stage;
pub mod stages;
pub(crate) mod step;
pub mod transport;

use std::sync::Arc;

pub use counters::PpCounters;
pub use error::PpError;
pub use mailboxes::Mailboxes;
pub use mpi_link::MpiLink;
pub use roles::PipelineRoles;
pub use stage::PpStage;
pub use transport::PointToPoint;

/// `--pipeline-parallel-size` and the counters `/metrics` reads.
#[derive(Clone)]
pub struct PipelineParallelConfig {
    /// Stages (1: off).
    pub size: usize,
    /// Micro-batches per step; `None` (the default): `micro_batch::count`'s rule. Tests set it
    /// to compare a split step with a whole one.
    pub micro_batches: Option<usize>,
    pub counters: Arc<PpCounters>,
    /// The stages are the processes of this MPI job (`None`: threads of this process).
    pub mpi: Option<&'static pagoda_mpi::Mpi>,
}

impl std::fmt::Debug for PipelineParallelConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PipelineParallelConfig")
            .field("size", &self.size)
            .field("micro_batches", &self.micro_batches)
            .field("mpi", &self.mpi.is_some())
            .finish_non_exhaustive()
    }
}

impl Default for PipelineParallelConfig {
    fn default() -> Self {
        Self::new(1)
    }
}

impl PipelineParallelConfig {
    pub fn new(size: usize) -> Self {
        Self {
            size,
            micro_batches: None,
            counters: Arc::new(PpCounters::new(size)),
            mpi: None,
        }
    }
}

impl PartialEq for PipelineParallelConfig {
    fn eq(&self, other: &Self) -> bool {
        (self.size, self.micro_batches, self.mpi.is_some())
            == (other.size, other.micro_batches, other.mpi.is_some())
    }
}

impl Eq for PipelineParallelConfig {}
