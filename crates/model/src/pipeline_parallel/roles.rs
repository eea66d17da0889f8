//! `PipelineRoles`: the `RankRole` of a pipeline's ranks: rank r loads stage r's layers and
//! meets its neighbours over the link; a failure is a `PpError::StageFailed`.

use std::sync::Arc;

use pagoda_gguf::GgufFile;

use super::counters::PpCounters;
use super::error::PpError;
use super::stage::PpStage;
use super::transport::PointToPoint;
use crate::ModelError;
use crate::models::Model;
use crate::tensor_parallel::RankRole;

/// Pipeline stages over one link.
pub struct PipelineRoles {
    pub link: Arc<dyn PointToPoint>,
    pub counters: Arc<PpCounters>,
    /// Micro-batches per step; `None`: the rule (`micro_batch::count`).
    pub micro_batches: Option<usize>,
}

impl RankRole for PipelineRoles {
    fn load(&self, file: Arc<GgufFile>, rank: usize) -> Result<Model, ModelError> {
        let stage = PpStage::new(
            rank,
            Arc::clone(&self.link),
            Arc::clone(&self.counters),
            self.micro_batches,
        );
        Model::load_stage(file, stage)
    }

    fn abort(&self) {
        self.link.abort();
    }

    fn name(&self) -> &'static str {
        "pp"
    }

    fn failed(&self, rank: usize, message: String) -> ModelError {
        PpError::StageFailed {
            stage: rank,
            message,
        }
        .into()
    }
}
