//! `TpError`: why a model cannot be split over the ranks asked for (the start-up rules), or a
//! rank that failed.

use thiserror::Error;

/// Why a model cannot be split over the requested ranks, or why a group stopped.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum TpError {
    #[error("--tensor-parallel-size must be at least 1")]
    ZeroSize,
    #[error(
        "--tensor-parallel-size {size} does not divide the model's {heads} query heads \
         (choose a size that does)"
    )]
    HeadsNotDivisible { heads: usize, size: usize },
    #[error(
        "--tensor-parallel-size {size} and the model's {kv_heads} KV heads: one must divide \
         the other (KV heads are split, or replicated when the ranks outnumber them)"
    )]
    KvHeadsIncompatible { kv_heads: usize, size: usize },
    #[error(
        "tensor `{tensor}` cannot be split by input columns at {at}: its {ty} blocks hold \
         {block} values (choose another --tensor-parallel-size)"
    )]
    NotBlockAligned {
        tensor: String,
        ty: String,
        at: usize,
        block: usize,
    },
    #[error("{what} of {total} cannot be split over {size} ranks in whole blocks of {align}")]
    TooSmall {
        what: &'static str,
        total: usize,
        size: usize,
        align: usize,
    },
    #[error(
        "{asked} ranks with --distributed-executor-backend mpi need as many processes: \
         mpirun started {launched} (mpirun -np {asked} ...)"
    )]
    MpiSize { asked: usize, launched: usize },
    #[error("MPI: {0}")]
    Mpi(String),
    #[error("tensor-parallel rank {rank} failed: {message}")]
    RankFailed { rank: usize, message: String },
}
