//! The waiting queue: FCFS by arrival, or by `priority` (lower first) then arrival. Preempted
//! sequences go back to the front, ahead of every sequence that never ran.

use std::collections::VecDeque;

use crate::request::SeqId;

/// Sort key of a waiting sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct QueueKey {
    /// Preempted sequences first (false < true, so this is "not preempted").
    pub fresh: bool,
    pub priority: i32,
    pub arrival_seq: u64,
}

/// Waiting sequences in scheduling order.
#[derive(Debug, Default)]
pub struct WaitingQueue {
    /// Kept sorted by key; arrivals are nearly always appended, so insertion is cheap.
    items: VecDeque<(QueueKey, SeqId)>,
    by_priority: bool,
}

impl WaitingQueue {
    pub fn new(by_priority: bool) -> Self {
        Self {
            items: VecDeque::new(),
            by_priority,
        }
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Adds a sequence in its place.
    pub fn push(&mut self, seq: SeqId, mut key: QueueKey) {
        if !self.by_priority {
            key.priority = 0;
        }
        let at = self.items.partition_point(|(k, _)| *k <= key);
        self.items.insert(at, (key, seq));
    }

    /// Sequences in scheduling order.
    pub fn iter(&self) -> impl Iterator<Item = SeqId> + '_ {
        self.items.iter().map(|(_, s)| *s)
    }

    pub fn remove(&mut self, seq: SeqId) -> bool {
        match self.items.iter().position(|(_, s)| *s == seq) {
            Some(i) => {
                self.items.remove(i);
                true
            }
            None => false,
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
        let mut q = WaitingQueue::new(false);
        q.push(1, key(true, 5, 1));
        q.push(2, key(true, -5, 2));
        q.push(3, key(false, 0, 3));
        assert_eq!(q.iter().collect::<Vec<_>>(), vec![3, 1, 2]);
    }

    #[test]
    fn priority_orders_then_arrival() {
        let mut q = WaitingQueue::new(true);
        q.push(1, key(true, 5, 1));
        q.push(2, key(true, -5, 2));
        q.push(3, key(true, 5, 0));
        assert_eq!(q.iter().collect::<Vec<_>>(), vec![2, 3, 1]);
        assert!(q.remove(3));
        assert_eq!(q.iter().collect::<Vec<_>>(), vec![2, 1]);
    }
}
