//! `Collective`: the operations tensor-parallel ranks synchronise through (sum all-reduce,
//! all-gather, barrier). Kept small so that another transport (processes, MPI) can implement
//! it; the in-process one is `SharedMemoryCollective`.

use pagoda_kernels::ops;
use thiserror::Error;

/// Why a collective operation did not complete.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum CollectiveError {
    /// A rank failed (or the group is shutting down): the group aborted, and every waiting
    /// or later operation returns this instead of waiting for it.
    #[error("the parallel group was aborted")]
    Aborted,
    /// A rank passed a buffer that does not fit the operation.
    #[error("collective buffer mismatch: {0}")]
    Mismatch(String),
    /// The transport between ranks in other processes failed.
    #[error("collective transport failed: {0}")]
    Transport(String),
}

/// The operations every rank of a group calls in the same order. Results must be
/// deterministic: the same inputs give the same bits on every rank and in every run (a fixed
/// reduction order), so that tensor-parallel outputs repeat from run to run.
pub trait Collective: Send + Sync {
    /// Ranks in the group.
    fn size(&self) -> usize;

    /// `x = sum over ranks of each rank's x`, summed in rank order (rank 0's part, plus rank
    /// 1's, ...): the same bits on every rank.
    fn all_reduce_sum(&self, rank: usize, x: &mut [f32]) -> Result<(), CollectiveError>;

    /// `out` = every rank's `part`, concatenated in rank order (parts may differ in length;
    /// `out.len()` must be their sum).
    fn all_gather(&self, rank: usize, part: &[f32], out: &mut [f32])
    -> Result<(), CollectiveError>;

    /// Returns once every rank has called it.
    fn barrier(&self, rank: usize) -> Result<(), CollectiveError>;

    /// Fails every operation in progress and every later one, on all ranks: a rank that
    /// failed calls it so that no other rank waits for it forever.
    fn abort(&self);
}

/// `x` = the sum of `parts`, added in their order (rank 0's part, plus rank 1's, ...): the one
/// summation order every transport's all-reduce uses, so all of them give the same bits.
pub(crate) fn sum_in_rank_order<'a>(
    x: &mut [f32],
    parts: impl IntoIterator<Item = &'a [f32]>,
) -> Result<(), CollectiveError> {
    for (r, part) in parts.into_iter().enumerate() {
        if part.len() != x.len() {
            return Err(CollectiveError::Mismatch(format!(
                "all-reduce of {} values met rank {r}'s {}",
                x.len(),
                part.len()
            )));
        }
        if r == 0 {
            x.copy_from_slice(part);
        } else {
            ops::add_inplace(x, part);
        }
    }
    Ok(())
}
