//! `RankRole`: what makes a `RankGroup` tensor- or pipeline-parallel: how rank r loads its part
//! of the model, how every rank's waits are cut short when one fails, and how a failure is
//! reported. The group's threads, pinning and failure handling are the same for both.

use std::sync::Arc;

use pagoda_gguf::GgufFile;

use super::collective::Collective;
use super::error::TpError;
use super::rank::{TpCounters, TpRank};
use crate::ModelError;
use crate::models::Model;

/// The kind of a group's ranks.
pub trait RankRole: Send + Sync {
    /// Rank `rank`'s part of the model in `file` (called on the rank's pinned thread, so its
    /// weights are first touched there).
    fn load(&self, file: Arc<GgufFile>, rank: usize) -> Result<Model, ModelError>;

    /// Fails every wait of every rank (a rank failed, or the group is stopping).
    fn abort(&self);

    /// Short name for thread names and logs (`tp`, `pp`).
    fn name(&self) -> &'static str;

    /// The error of a step after rank `rank` failed with `message`.
    fn failed(&self, rank: usize, message: String) -> ModelError;
}

/// Tensor-parallel ranks: each loads its shard and meets the others in `comm`.
pub struct TensorRoles {
    pub comm: Arc<dyn Collective>,
    pub counters: Arc<TpCounters>,
}

impl RankRole for TensorRoles {
    fn load(&self, file: Arc<GgufFile>, rank: usize) -> Result<Model, ModelError> {
        let tp = TpRank::new(rank, Arc::clone(&self.comm), Arc::clone(&self.counters));
        Model::load_rank(file, tp)
    }

    fn abort(&self) {
        self.comm.abort();
    }

    fn name(&self) -> &'static str {
        "tp"
    }

    fn failed(&self, rank: usize, message: String) -> ModelError {
        TpError::RankFailed { rank, message }.into()
    }
}
