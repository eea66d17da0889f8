//! `least_load`: the replica with the fewest requests in flight (the router's own count, or
//! the running + waiting gauges of its /metrics when larger: other clients count too).

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use super::{Choice, Policy, argmin_rotating};
use crate::routing_key::RoutingKey;
use crate::worker::Worker;

/// Rotates among equally loaded replicas.
#[derive(Debug, Default)]
pub struct LeastLoad {
    turn: AtomicUsize,
}

impl Policy for LeastLoad {
    fn select(&self, workers: &[Arc<Worker>], _key: &RoutingKey) -> Choice {
        Choice::plain(argmin_rotating(workers.len(), &self.turn, |i| {
            workers[i].load()
        }))
    }
}
