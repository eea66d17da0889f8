//! `SharedMemoryCollective`: the collective of ranks that are threads of one process. Each
//! rank copies its part into its own slot, all meet at a barrier, then every rank sums the
//! slots in rank order itself, so all ranks get the same bits and no rank waits for another
//! to publish a result. Slots are double-buffered by operation parity, so one barrier per
//! operation is enough: a rank can only reuse a slot after the next barrier, which every rank
//! reaches only once it has read that slot.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use super::collective::{Collective, CollectiveError, sum_in_rank_order};

/// Spins before a waiting rank starts yielding its core (ranks arrive within microseconds of
/// each other when their work is balanced; yielding keeps an oversubscribed machine moving).
const SPINS_BEFORE_YIELD: u32 = 1 << 12;

/// One rank's buffers: two slots (by operation parity) and the length written to each.
struct Slot {
    bufs: [UnsafeCell<Vec<f32>>; 2],
    lens: [AtomicUsize; 2],
    /// Operations this rank has started (its parity is `ops % 2`).
    ops: AtomicU64,
}

/// The in-process collective of `size` ranks.
pub struct SharedMemoryCollective {
    slots: Vec<Slot>,
    arrived: AtomicUsize,
    generation: AtomicU64,
    aborted: AtomicBool,
}

// SAFETY: a slot's buffer of parity p is written only by its own rank, before the barrier of
// an operation of parity p, and read by the others only between that barrier and the next
// one (module doc); the barrier's Release/Acquire pair orders the writes before the reads.
unsafe impl Sync for SharedMemoryCollective {}

impl SharedMemoryCollective {
    pub fn new(size: usize) -> Self {
        let slot = || Slot {
            bufs: [UnsafeCell::new(Vec::new()), UnsafeCell::new(Vec::new())],
            lens: [AtomicUsize::new(0), AtomicUsize::new(0)],
            ops: AtomicU64::new(0),
        };
        Self {
            slots: (0..size.max(1)).map(|_| slot()).collect(),
            arrived: AtomicUsize::new(0),
            generation: AtomicU64::new(0),
            aborted: AtomicBool::new(false),
        }
    }

    fn check(&self, rank: usize) -> Result<(), CollectiveError> {
        if self.aborted.load(Ordering::Acquire) {
            return Err(CollectiveError::Aborted);
        }
        if rank >= self.slots.len() {
            return Err(CollectiveError::Mismatch(format!(
                "rank {rank} of a group of {}",
                self.slots.len()
            )));
        }
        Ok(())
    }

    /// Copies `part` into `rank`'s slot of this operation's parity, returns the parity.
    fn publish(&self, rank: usize, part: &[f32]) -> usize {
        let slot = &self.slots[rank];
        let parity = (slot.ops.fetch_add(1, Ordering::Relaxed) % 2) as usize;
        // SAFETY: only `rank` writes its own slot, and other ranks read this parity's buffer
        // only after the barrier that follows (see the `Sync` impl).
        let buf = unsafe { &mut *slot.bufs[parity].get() };
        buf.clear();
        buf.extend_from_slice(part);
        slot.lens[parity].store(part.len(), Ordering::Relaxed);
        parity
    }

    /// Rank `r`'s buffer of `parity`, between the barrier and the next one.
    fn part(&self, r: usize, parity: usize) -> &[f32] {
        let slot = &self.slots[r];
        let len = slot.lens[parity].load(Ordering::Relaxed);
        // SAFETY: read after the barrier that follows its owner's write (see the `Sync` impl).
        unsafe { &(&*slot.bufs[parity].get())[..len] }
    }

    /// A sense-counting barrier: the last rank to arrive opens the next generation.
    fn wait_all(&self) -> Result<(), CollectiveError> {
        let generation = self.generation.load(Ordering::Acquire);
        if self.arrived.fetch_add(1, Ordering::AcqRel) + 1 == self.slots.len() {
            self.arrived.store(0, Ordering::Relaxed);
            self.generation.fetch_add(1, Ordering::AcqRel);
            return Ok(());
        }
        let mut spins = 0u32;
        while self.generation.load(Ordering::Acquire) == generation {
            if self.aborted.load(Ordering::Acquire) {
                return Err(CollectiveError::Aborted);
            }
            spins = spins.saturating_add(1);
            if spins < SPINS_BEFORE_YIELD {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        Ok(())
    }
}

impl Collective for SharedMemoryCollective {
    fn size(&self) -> usize {
        self.slots.len()
    }

    fn all_reduce_sum(&self, rank: usize, x: &mut [f32]) -> Result<(), CollectiveError> {
        self.check(rank)?;
        if self.slots.len() == 1 {
            return Ok(());
        }
        let parity = self.publish(rank, x);
        self.wait_all()?;
        let parts = (0..self.slots.len()).map(|r| self.part(r, parity));
        sum_in_rank_order(x, parts).inspect_err(|_| self.abort())
    }

    fn all_gather(
        &self,
        rank: usize,
        part: &[f32],
        out: &mut [f32],
    ) -> Result<(), CollectiveError> {
        self.check(rank)?;
        let parity = self.publish(rank, part);
        self.wait_all()?;
        let total: usize = (0..self.slots.len())
            .map(|r| self.part(r, parity).len())
            .sum();
        if total != out.len() {
            self.abort();
            return Err(CollectiveError::Mismatch(format!(
                "all-gather of {total} values into {}",
                out.len()
            )));
        }
        let mut at = 0;
        for r in 0..self.slots.len() {
            let p = self.part(r, parity);
            out[at..at + p.len()].copy_from_slice(p);
            at += p.len();
        }
        Ok(())
    }

    fn barrier(&self, rank: usize) -> Result<(), CollectiveError> {
        self.check(rank)?;
        self.publish(rank, &[]);
        self.wait_all()
    }

    fn abort(&self) {
        self.aborted.store(true, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::sync::Arc;

    fn on_ranks<R: Send + 'static>(
        size: usize,
        f: impl Fn(usize, &SharedMemoryCollective) -> R + Send + Sync + 'static,
    ) -> Vec<R> {
        let c = Arc::new(SharedMemoryCollective::new(size));
        let f = Arc::new(f);
        let handles: Vec<_> = (0..size)
            .map(|r| {
                let (c, f) = (Arc::clone(&c), Arc::clone(&f));
                std::thread::spawn(move || f(r, &c))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    }

    #[test]
    fn all_reduce_sums_in_rank_order_on_every_rank() {
        let results = on_ranks(3, |r, c| {
            let mut outs = Vec::new();
            for round in 0..50 {
                let mut x: Vec<f32> = (0..37)
                    .map(|i| (i * (r + 1) + round) as f32 * 0.1)
                    .collect();
                c.all_reduce_sum(r, &mut x).unwrap();
                outs.push(x);
            }
            outs
        });
        for round in 0..50 {
            let want: Vec<f32> = (0..37)
                .map(|i| {
                    let part = |r: usize| (i * (r + 1) + round) as f32 * 0.1;
                    part(0) + part(1) + part(2)
                })
                .collect();
            for r in &results {
                assert_eq!(r[round], want, "round {round}");
            }
        }
    }

    #[test]
    fn all_gather_concatenates_uneven_parts() {
        let results = on_ranks(2, |r, c| {
            let part = vec![r as f32; r + 2];
            let mut out = vec![0.0; 5];
            c.all_gather(r, &part, &mut out).unwrap();
            c.barrier(r).unwrap();
            out
        });
        for out in results {
            assert_eq!(out, [0.0, 0.0, 1.0, 1.0, 1.0]);
        }
    }

    #[test]
    fn abort_releases_a_waiting_rank() {
        let c = Arc::new(SharedMemoryCollective::new(2));
        let waiter = {
            let c = Arc::clone(&c);
            std::thread::spawn(move || c.all_reduce_sum(0, &mut [1.0]))
        };
        std::thread::sleep(std::time::Duration::from_millis(20));
        c.abort();
        assert_eq!(waiter.join().unwrap(), Err(CollectiveError::Aborted));
        assert_eq!(c.barrier(1), Err(CollectiveError::Aborted));
    }
}
