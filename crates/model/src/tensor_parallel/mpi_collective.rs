//! `MpiCollective`: the collective of ranks that are processes of an MPI job (one per NUMA
//! node or machine). An all-reduce gathers every rank's part and each rank sums them in rank
//! order itself, as `SharedMemoryCollective` does, so the bits are the same on every rank, in
//! every run and as with ranks that are threads (MPI's own reductions fix no order).

use std::sync::Mutex;

use pagoda_mpi::Mpi;

use super::collective::{Collective, CollectiveError, sum_in_rank_order};

pub struct MpiCollective {
    mpi: &'static Mpi,
    /// Every rank's part of the last operation (kept to reuse its memory).
    gathered: Mutex<Vec<f32>>,
}

impl MpiCollective {
    pub fn new(mpi: &'static Mpi) -> Self {
        Self {
            mpi,
            gathered: Mutex::new(Vec::new()),
        }
    }

    /// Every rank's `part`; `equal`: all parts have this one's length (an all-reduce), so no
    /// lengths are exchanged first.
    fn gather(
        &self,
        part: &[f32],
        equal: bool,
    ) -> Result<std::sync::MutexGuard<'_, Vec<f32>>, CollectiveError> {
        let mut all = self.gathered.lock().map_err(|_| CollectiveError::Aborted)?;
        let gathered = if equal {
            self.mpi.all_gather_equal_f32(part, &mut all)
        } else {
            self.mpi.all_gather_f32(part, &mut all)
        };
        gathered.map_err(|e| CollectiveError::Transport(e.to_string()))?;
        Ok(all)
    }
}

impl Collective for MpiCollective {
    fn size(&self) -> usize {
        self.mpi.size()
    }

    fn all_reduce_sum(&self, _rank: usize, x: &mut [f32]) -> Result<(), CollectiveError> {
        let all = self.gather(x, true)?;
        let n = x.len();
        if all.len() != n * self.size() {
            return Err(CollectiveError::Mismatch(format!(
                "all-reduce of {n} values met {} in all",
                all.len()
            )));
        }
        sum_in_rank_order(x, all.chunks_exact(n.max(1)))
    }

    fn all_gather(
        &self,
        _rank: usize,
        part: &[f32],
        out: &mut [f32],
    ) -> Result<(), CollectiveError> {
        let all = self.gather(part, false)?;
        if all.len() != out.len() {
            return Err(CollectiveError::Mismatch(format!(
                "all-gather of {} values into {}",
                all.len(),
                out.len()
            )));
        }
        out.copy_from_slice(&all);
        Ok(())
    }

    fn barrier(&self, _rank: usize) -> Result<(), CollectiveError> {
        self.mpi
            .barrier()
            .map_err(|e| CollectiveError::Transport(e.to_string()))
    }

    /// A rank failed inside a step: the others are blocked in MPI calls that only ending the
    /// job can cut short (`mpirun` then reports which rank failed).
    fn abort(&self) {
        tracing::error!("a parallel rank failed: ending the MPI job");
        self.mpi.abort(1)
    }
}
