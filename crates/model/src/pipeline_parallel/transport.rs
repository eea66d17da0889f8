//! `PointToPoint`: how pipeline stages hand each other the residual stream (and the last stage
//! hands rank 0 its logits): ordered messages from one stage to another, with the same abort as
//! the tensor-parallel `Collective`. Kept small so that a process or MPI transport can
//! implement it; the in-process one is `Mailboxes`.

use crate::tensor_parallel::CollectiveError;

/// Ordered messages between the stages of one pipeline.
pub trait PointToPoint: Send + Sync {
    /// Stages in the pipeline.
    fn size(&self) -> usize;

    /// Queues `data` for stage `to`; messages from one stage to another arrive in order.
    fn send(&self, from: usize, to: usize, data: Vec<f32>) -> Result<(), CollectiveError>;

    /// The next message from `from` to `to`, waiting for it.
    fn recv(&self, from: usize, to: usize) -> Result<Vec<f32>, CollectiveError>;

    /// Fails every wait in progress and every later one, on all stages.
    fn abort(&self);
}
