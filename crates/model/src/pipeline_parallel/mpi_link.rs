//! `MpiLink`: the `PointToPoint` of stages that are processes of an MPI job (a machine each, on
//! links too slow for tensor parallelism's per-layer all-reduces): a stage's send returns at
//! once (MPI_Isend, as the in-process mailboxes queue), so a stage never waits for the next to
//! take its micro-batch, and the last stage's logits can always reach rank 0.

use pagoda_mpi::Mpi;

use super::transport::PointToPoint;
use crate::tensor_parallel::CollectiveError;

/// The one tag of stage-to-stage messages: each (sender, receiver) pair is one ordered stream.
const TAG: i32 = 7;

pub struct MpiLink {
    mpi: &'static Mpi,
}

impl MpiLink {
    pub fn new(mpi: &'static Mpi) -> Self {
        Self { mpi }
    }
}

fn transport(e: pagoda_mpi::MpiError) -> CollectiveError {
    CollectiveError::Transport(e.to_string())
}

impl PointToPoint for MpiLink {
    fn size(&self) -> usize {
        self.mpi.size()
    }

    fn send(&self, _from: usize, to: usize, data: Vec<f32>) -> Result<(), CollectiveError> {
        self.mpi.send_f32(data, to, TAG).map_err(transport)
    }

    fn recv(&self, from: usize, _to: usize) -> Result<Vec<f32>, CollectiveError> {
        self.mpi.recv_f32(from, TAG).map_err(transport)
    }

    /// A stage failed mid-step: the others wait inside MPI calls only ending the job cuts.
    fn abort(&self) {
        tracing::error!("a pipeline stage failed: ending the MPI job");
        self.mpi.abort(1)
    }
}
