//! The waiting-queue limit, counted in one place: every sequence added holds a `QueueSlots`
//! share until it is first scheduled or ends, and dropping the share is the only way the count
//! goes down. A request takes all its slots at once or none, so a refused one leaves no trace.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::add_request_error::AddRequestError;

/// Sequences added but not yet scheduled, against `max_waiting_requests`. Shared by the engine
/// core and its handle (which answers a full queue before anything reaches the engine thread).
#[derive(Debug)]
pub struct Admission {
    limit: usize,
    waiting: AtomicUsize,
}

impl Admission {
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self {
            limit,
            waiting: AtomicUsize::new(0),
        })
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Sequences holding a slot now.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Acquire)
    }

    /// Takes `n` slots, or none: `NeverAdmissible` when `n` is over the limit itself (retrying
    /// cannot help), `QueueFull` with the real queue length when the others would not fit now.
    pub fn reserve(self: &Arc<Self>, n: usize) -> Result<QueueSlots, AddRequestError> {
        if n > self.limit {
            return Err(AddRequestError::NeverAdmissible {
                requested: n,
                limit: self.limit,
            });
        }
        let mut waiting = self.waiting.load(Ordering::Acquire);
        loop {
            if waiting + n > self.limit {
                return Err(AddRequestError::QueueFull {
                    waiting,
                    requested: n,
                    limit: self.limit,
                });
            }
            match self.waiting.compare_exchange_weak(
                waiting,
                waiting + n,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    return Ok(QueueSlots {
                        admission: Arc::clone(self),
                        n,
                    });
                }
                Err(now) => waiting = now,
            }
        }
    }
}

/// `n` reserved queue slots; dropped, they are given back.
#[derive(Debug)]
pub struct QueueSlots {
    admission: Arc<Admission>,
    n: usize,
}

impl QueueSlots {
    pub fn len(&self) -> usize {
        self.n
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Moves `k` of these slots (at most all of them) into a share of their own.
    pub fn split(&mut self, k: usize) -> QueueSlots {
        let k = k.min(self.n);
        self.n -= k;
        QueueSlots {
            admission: Arc::clone(&self.admission),
            n: k,
        }
    }
}

impl Drop for QueueSlots {
    fn drop(&mut self) {
        self.admission.waiting.fetch_sub(self.n, Ordering::AcqRel);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn all_or_nothing_and_given_back_on_drop() {
        let a = Admission::new(4);
        let mut three = a.reserve(3).unwrap();
        assert_eq!(a.waiting(), 3);
        assert_eq!(
            a.reserve(2).unwrap_err(),
            AddRequestError::QueueFull {
                waiting: 3,
                requested: 2,
                limit: 4
            }
        );
        assert_eq!(a.waiting(), 3, "a refused request holds nothing");
        assert_eq!(
            a.reserve(5).unwrap_err(),
            AddRequestError::NeverAdmissible {
                requested: 5,
                limit: 4
            }
        );
        let one = three.split(1);
        assert_eq!((three.len(), one.len()), (2, 1));
        drop(one);
        assert_eq!(a.waiting(), 2);
        drop(three);
        assert_eq!(a.waiting(), 0);
        let _four = a.reserve(4).unwrap();
    }
}
