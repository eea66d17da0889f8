//! `Mailboxes`: the in-process `PointToPoint` of stages that are threads: one queue per
//! (sender, receiver) pair. A receiver spins briefly before it sleeps, because the next
//! micro-batch usually arrives within a fraction of a millisecond and a futex wake-up on every
//! hand-off would add to every stage's bubble (`RankGroup`'s workers spin for the same reason).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use super::transport::PointToPoint;
use crate::tensor_parallel::CollectiveError;
use crate::tensor_parallel::group::SPIN_TIME;

/// A sleeping receiver wakes this often to look at the abort flag (a lost wake-up costs this
/// much, never a hang).
const WAKE_EVERY: Duration = Duration::from_millis(50);

#[derive(Default)]
struct Mailbox {
    queue: Mutex<VecDeque<Vec<f32>>>,
    arrived: Condvar,
    /// Messages queued (read without the lock while spinning).
    pending: AtomicUsize,
}

/// The queues of a pipeline of `size` stages.
pub struct Mailboxes {
    size: usize,
    boxes: Vec<Mailbox>,
    aborted: AtomicBool,
}

impl Mailboxes {
    pub fn new(size: usize) -> Self {
        let size = size.max(1);
        Self {
            size,
            boxes: (0..size * size).map(|_| Mailbox::default()).collect(),
            aborted: AtomicBool::new(false),
        }
    }

    fn mailbox(&self, from: usize, to: usize) -> Result<&Mailbox, CollectiveError> {
        if self.aborted.load(Ordering::Acquire) {
            return Err(CollectiveError::Aborted);
        }
        if from >= self.size || to >= self.size {
            return Err(CollectiveError::Mismatch(format!(
                "message from stage {from} to {to} in a pipeline of {}",
                self.size
            )));
        }
        Ok(&self.boxes[from * self.size + to])
    }
}

impl PointToPoint for Mailboxes {
    fn size(&self) -> usize {
        self.size
    }

    fn send(&self, from: usize, to: usize, data: Vec<f32>) -> Result<(), CollectiveError> {
        let b = self.mailbox(from, to)?;
        let mut q = b.queue.lock().unwrap_or_else(|e| e.into_inner());
        q.push_back(data);
        b.pending.fetch_add(1, Ordering::Release);
        b.arrived.notify_one();
        Ok(())
    }

    fn recv(&self, from: usize, to: usize) -> Result<Vec<f32>, CollectiveError> {
        let b = self.mailbox(from, to)?;
        let start = Instant::now();
        while b.pending.load(Ordering::Acquire) == 0
            && !self.aborted.load(Ordering::Relaxed)
            && start.elapsed() < SPIN_TIME
        {
            std::hint::spin_loop();
        }
        let mut q = b.queue.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if self.aborted.load(Ordering::Acquire) {
                return Err(CollectiveError::Aborted);
            }
            if let Some(v) = q.pop_front() {
                b.pending.fetch_sub(1, Ordering::Relaxed);
                return Ok(v);
            }
            q = b
                .arrived
                .wait_timeout(q, WAKE_EVERY)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    fn abort(&self) {
        self.aborted.store(true, Ordering::Release);
        for b in &self.boxes {
            // Taking the lock orders the flag before a receiver's next look at it.
            let _q = b.queue.lock().unwrap_or_else(|e| e.into_inner());
            b.arrived.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::Arc;

    use super::*;

    #[test]
    fn messages_arrive_in_order_and_abort_wakes_a_waiting_receiver() {
        let m = Arc::new(Mailboxes::new(2));
        m.send(0, 1, vec![1.0]).unwrap();
        m.send(0, 1, vec![2.0, 3.0]).unwrap();
        assert_eq!(m.recv(0, 1).unwrap(), [1.0]);
        assert_eq!(m.recv(0, 1).unwrap(), [2.0, 3.0]);
        assert!(matches!(m.recv(2, 0), Err(CollectiveError::Mismatch(_))));
        let waiting = {
            let m = Arc::clone(&m);
            std::thread::spawn(move || m.recv(1, 0))
        };
        std::thread::sleep(Duration::from_millis(20));
        m.abort();
        assert_eq!(waiting.join().unwrap(), Err(CollectiveError::Aborted));
        assert_eq!(m.send(0, 1, vec![]), Err(CollectiveError::Aborted));
    }
}
