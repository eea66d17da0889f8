//! What every rank is built from, whether a thread or a process: the shape of its KV cache,
//! its kernel pool pinned to its CPUs, and the message a rank's panic reports.

use std::any::Any;

use pagoda_kernels::parallel::RankPool;

use super::affinity;
use super::rank::CollectivePanic;
use crate::config::KvCacheDtype;
use crate::kv::groups::KvGroupPlan;

/// How each rank's KV cache and kernel pool are built.
pub struct KvShape {
    pub dtype: KvCacheDtype,
    pub plan: KvGroupPlan,
    pub num_blocks: usize,
    pub block_size: usize,
    /// Kernel threads per rank (`None`: the rank's share of the CPUs).
    pub threads_per_rank: Option<usize>,
}

/// Rank `rank`'s kernel pool: `threads` (or one per CPU of `cpus`), its workers pinned to
/// `cpus`, so its kernels stay on its cores and beside the other ranks'.
pub(crate) fn rank_pool(threads: Option<usize>, cpus: &[usize]) -> RankPool {
    let cpus = cpus.to_vec();
    RankPool::start(threads.unwrap_or(cpus.len()).max(1), move |_| {
        affinity::pin_current_thread(&cpus);
    })
}

/// What a rank's panic says (a failed collective's error, or the panic's text).
pub(crate) fn panic_message(p: &(dyn Any + Send)) -> String {
    if let Some(c) = p.downcast_ref::<CollectivePanic>() {
        c.0.to_string()
    } else if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "panicked".to_string()
    }
}
