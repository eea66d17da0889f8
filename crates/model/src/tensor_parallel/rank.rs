//! `TpRank`: what a model shard holds of its group: its rank, the collective, and the
//! counters of time and bytes spent synchronising. The forward pass has no error path, so a
//! failed collective unwinds (a panic carrying the error) to the executor, which catches it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use super::collective::{Collective, CollectiveError};

/// All-reduce and gather time and bytes, counted on rank 0 (the time includes waiting for
/// the slowest rank: what tensor parallelism costs a step). Read by `/metrics`.
#[derive(Debug, Default)]
pub struct TpCounters {
    pub all_reduce_nanos: AtomicU64,
    pub all_reduce_bytes: AtomicU64,
    pub all_reduces: AtomicU64,
    pub gather_nanos: AtomicU64,
    pub gather_bytes: AtomicU64,
}

impl TpCounters {
    pub fn all_reduce_seconds(&self) -> f64 {
        self.all_reduce_nanos.load(Ordering::Relaxed) as f64 * 1e-9
    }

    pub fn gather_seconds(&self) -> f64 {
        self.gather_nanos.load(Ordering::Relaxed) as f64 * 1e-9
    }
}

/// A rank's handle on its group.
pub struct TpRank {
    pub rank: usize,
    comm: Arc<dyn Collective>,
    counters: Arc<TpCounters>,
}

/// The payload of the panic a failed collective raises inside a forward pass.
#[derive(Debug)]
pub struct CollectivePanic(pub CollectiveError);

impl TpRank {
    pub fn new(rank: usize, comm: Arc<dyn Collective>, counters: Arc<TpCounters>) -> Self {
        Self {
            rank,
            comm,
            counters,
        }
    }

    pub fn size(&self) -> usize {
        self.comm.size()
    }

    /// `x` summed over the ranks.
    pub fn all_reduce(&self, x: &mut [f32]) {
        let c = &self.counters;
        let bytes = std::mem::size_of_val(x);
        self.timed((&c.all_reduce_nanos, &c.all_reduce_bytes), bytes, || {
            self.comm.all_reduce_sum(self.rank, x)
        });
        if self.rank == 0 {
            c.all_reduces.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// `out` = every rank's `part` in rank order.
    pub fn all_gather(&self, part: &[f32], out: &mut [f32]) {
        let c = &self.counters;
        let bytes = std::mem::size_of_val(out);
        self.timed((&c.gather_nanos, &c.gather_bytes), bytes, || {
            self.comm.all_gather(self.rank, part, out)
        });
    }

    /// Runs `op`, unwinding on its error; on rank 0 adds its time and `bytes` to the counters.
    fn timed(
        &self,
        (nanos, total): (&AtomicU64, &AtomicU64),
        bytes: usize,
        op: impl FnOnce() -> Result<(), CollectiveError>,
    ) {
        let start = Instant::now();
        if let Err(e) = op() {
            std::panic::panic_any(CollectivePanic(e));
        }
        if self.rank == 0 {
            nanos.fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
            total.fetch_add(bytes as u64, Ordering::Relaxed);
        }
    }

    /// Fails the group's operations on every rank.
    pub fn abort(&self) {
        self.comm.abort();
    }
}
