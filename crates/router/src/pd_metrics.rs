//! The router's prefill/decode counters (`pagoda_router:pd_*`), kept apart from `pd.rs` so
//! the router state that holds them does not import the routing that counts into them.

use std::sync::atomic::{AtomicU64, Ordering};

use pagoda_exposition::Exposition;

/// The router's prefill/decode counters (`pagoda_router:pd_*`).
#[derive(Debug, Default)]
pub struct PdMetrics {
    /// Requests prefilled on a prefill replica and decoded on another.
    pub remote: AtomicU64,
    /// Requests under the threshold, prefilled on their decode replica.
    pub local: AtomicU64,
    /// Prefill hops that failed (the decode replica prefilled instead).
    pub prefill_failures: AtomicU64,
    /// Microseconds spent in prefill hops.
    pub prefill_micros: AtomicU64,
}

impl PdMetrics {
    /// The `pagoda_router:pd_*` families and the prefill replicas' health.
    pub fn render(&self, e: &mut Exposition, prefill: &crate::pool::Pool) {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        for (name, help, v) in [
            (
                "pagoda_router:pd_remote_total",
                "Requests prefilled on a prefill replica, decoded on a decode replica.",
                get(&self.remote),
            ),
            (
                "pagoda_router:pd_local_total",
                "Requests under --pd-threshold uncached tokens, prefilled on their decode replica.",
                get(&self.local),
            ),
            (
                "pagoda_router:pd_prefill_failures_total",
                "Prefill hops that failed (the decode replica prefilled instead).",
                get(&self.prefill_failures),
            ),
        ] {
            e.counter(name, help, Vec::new(), v);
        }
        e.counter(
            "pagoda_router:pd_prefill_seconds_total",
            "Time spent in prefill hops.",
            Vec::new(),
            get(&self.prefill_micros) as f64 / 1e6,
        );
        e.scraped(
            "pagoda_router:pd_prefill_worker_health",
            "1 for each prefill replica's current health.",
            crate::metrics::health(&prefill.workers()),
        );
    }
}
