//! `PpError`: why a model cannot be cut into the pipeline stages asked for (the start-up
//! rules), a feature not combined with pipeline parallelism yet, or a stage that failed.

use thiserror::Error;

/// Why a model cannot be split into the requested stages, or why the pipeline stopped.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum PpError {
    #[error("--pipeline-parallel-size must be at least 1")]
    ZeroSize,
    #[error(
        "--pipeline-parallel-size {size} is more stages than the model's {layers} layers \
         (each stage holds at least one layer)"
    )]
    MoreStagesThanLayers { size: usize, layers: usize },
    #[error(
        "--pipeline-parallel-size {pp} with --tensor-parallel-size {tp}: tensor and pipeline \
         parallelism are not combined yet (use one of them)"
    )]
    WithTensorParallel { tp: usize, pp: usize },
    #[error("pipeline parallelism does not support {0} yet")]
    Unsupported(&'static str),
    #[error("pipeline stage {stage} failed: {message}")]
    StageFailed { stage: usize, message: String },
}
