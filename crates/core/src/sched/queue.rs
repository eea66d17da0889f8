//! The waiting queue under the configured `SchedulingPolicy`: FCFS by arrival, by `priority`
//! (lower first) then arrival, or tenant-fair (`fair.rs`). Preempted sequences go back to the
//! front, ahead of every sequence that never ran.

use std::collections::VecDeque;

use super::fair::FairQueue;
use crate::config::SchedulingPolicy;
use crate::request::SeqId;
use crate::tenant::Tenant;

/// Sort key of a waiting sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct QueueKey {
    /// Preempted sequences first (false < true, so this is "not preempted").
    pub fresh: bool,
    pub priority: i32,
    pub arrival_seq: u64,
}

/// Waiting sequences in scheduling order.
#[derive(Debug)]
pub enum WaitingQueue {
    /// Kept sorted by key; arrivals are nearly always appended, so insertion is cheap.
    Sorted {
        items: VecDeque<(QueueKey, SeqId)>,
        by_priority: bool,
    },
    Fair(FairQueue),
}

impl WaitingQueue {
    /// A queue for `policy` whose steps compute at most `step_tokens` tokens.
    pub fn new(policy: SchedulingPolicy, step_tokens: usize) -> Self {
        match policy {
            SchedulingPolicy::Fair => Self::Fair(FairQueue::new(step_tokens)),
            p => Self::Sorted {
                items: VecDeque::new(),
                by_priority: p == SchedulingPolicy::Priority,
            },
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Self::Sorted { items, .. } => items.len(),
            Self::Fair(q) => q.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds a sequence of `tenant` in its place; `cost` is the tokens it will compute.
    pub fn push(&mut self, seq: SeqId, mut key: QueueKey, tenant: Tenant, cost: usize) {
        match self {
            Self::Sorted { items, by_priority } => {
                if !*by_priority {
                    key.priority = 0;
                }
                let at = items.partition_point(|(k, _)| *k <= key);
                items.insert(at, (key, seq));
            }
            Self::Fair(q) => q.push(seq, key.arrival_seq, key.fresh, tenant, cost),
        }
    }

    /// Counts tokens computed for `tenant` this step (only the fair order uses them).
    pub fn charge(&mut self, tenant: Tenant, tokens: usize) {
        if let Self::Fair(q) = self {
            q.charge(tenant, tokens);
        }
    }

    /// Sequences in scheduling order.
    pub fn iter(&self) -> std::vec::IntoIter<SeqId> {
        match self {
            Self::Sorted { items, .. } => items.iter().map(|(_, s)| *s).collect::<Vec<_>>(),
            Self::Fair(q) => q.order(),
        }
        .into_iter()
    }

    pub fn remove(&mut self, seq: SeqId) -> bool {
        match self {
            Self::Sorted { items, .. } => match items.iter().position(|(_, s)| *s == seq) {
                Some(i) => {
                    items.remove(i);
                    true
                }
                None => false,
            },
            Self::Fair(q) => q.remove(seq),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(fresh: bool, priority: i32, arrival_seq: u64) -> QueueKey {
        QueueKey {
            fresh,
            priority,
            arrival_seq,
        }
    }

    #[test]
    fn fcfs_ignores_priority_and_preempted_go_first() {
        let mut q = WaitingQueue::new(SchedulingPolicy::Fcfs, 64);
        let t = Tenant::default();
        q.push(1, key(true, 5, 1), t, 1);
        q.push(2, key(true, -5, 2), t, 1);
        q.push(3, key(false, 0, 3), t, 1);
        assert_eq!(q.iter().collect::<Vec<_>>(), vec![3, 1, 2]);
    }

    #[test]
    fn priority_orders_then_arrival() {
        let mut q = WaitingQueue::new(SchedulingPolicy::Priority, 64);
        let t = Tenant::default();
        q.push(1, key(true, 5, 1), t, 1);
        q.push(2, key(true, -5, 2), t, 1);
        q.push(3, key(true, 5, 0), t, 1);
        assert_eq!(q.iter().collect::<Vec<_>>(), vec![2, 3, 1]);
        assert!(q.remove(3));
        assert_eq!(q.iter().collect::<Vec<_>>(), vec![2, 1]);
    }
}
