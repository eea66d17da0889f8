//! `round_robin`: each request to the next replica that takes requests.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::{Choice, Policy};
use crate::routing_key::RoutingKey;
use crate::worker::Worker;

/// The turn counter.
#[derive(Debug, Default)]
pub struct RoundRobin {
    next: AtomicUsize,
}

impl Policy for RoundRobin {
    fn select(&self, workers: &[Arc<Worker>], _key: &RoutingKey) -> Choice {
        Choice::plain(self.next.fetch_add(1, Ordering::Relaxed) % workers.len().max(1))
    }
}
