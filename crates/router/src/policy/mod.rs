//! Routing policies: given the replicas that take requests and, when it could be computed,
//! the prompt's block hashes, pick one. One file per policy; each is a pure function of what
//! it is shown (plus a rotating counter for ties), so it is unit-tested without HTTP.

mod cache_aware;
mod least_load;
mod round_robin;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

pub use cache_aware::CacheAware;
pub use least_load::LeastLoad;
pub use round_robin::RoundRobin;

use crate::config::{PolicyKind, RouterConfig};
use crate::routing_key::RoutingKey;
use crate::worker::Worker;

/// What a policy decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Choice {
    /// Index into the candidates.
    pub index: usize,
    /// Prompt blocks the chosen replica holds, by its index (0 when unknown).
    pub matched_blocks: usize,
    /// The prompt's full blocks (0 when it was not tokenized).
    pub prompt_blocks: usize,
    /// The cache-aware choice was overridden because load was skewed.
    pub balanced: bool,
}

impl Choice {
    fn plain(index: usize) -> Self {
        Self {
            index,
            matched_blocks: 0,
            prompt_blocks: 0,
            balanced: false,
        }
    }
}

/// A routing policy.
pub trait Policy: Send + Sync {
    /// Picks one of `workers` (never empty).
    fn select(&self, workers: &[Arc<Worker>], key: &RoutingKey) -> Choice;
}

/// The policy `config` names.
pub fn build(config: &RouterConfig) -> Box<dyn Policy> {
    match config.policy {
        PolicyKind::RoundRobin => Box::new(RoundRobin::default()),
        PolicyKind::LeastLoad => Box::new(LeastLoad::default()),
        PolicyKind::CacheAware => Box::new(CacheAware::new(config.tuning)),
    }
}

/// The index of the smallest `cost`, ties broken by a rotating start so equal replicas share.
fn argmin_rotating<T: PartialOrd + Copy>(
    n: usize,
    turn: &AtomicUsize,
    cost: impl Fn(usize) -> T,
) -> usize {
    let start = turn.fetch_add(1, Ordering::Relaxed) % n.max(1);
    let mut best = start;
    for k in 1..n {
        let i = (start + k) % n;
        if cost(i) < cost(best) {
            best = i;
        }
    }
    best
}
