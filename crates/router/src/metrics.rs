//! The router's own `/metrics` (Prometheus text, prefix `pagoda_router:`): per replica its
//! health, requests, errors, times chosen, in flight and indexed blocks; the prefix blocks the
//! index promised against the prompts' blocks; retries and balance overrides.

use std::sync::atomic::{AtomicU64, Ordering};

use pagoda_exposition::{Exposition, Labels, Scraped};

use crate::policy::Choice;
use crate::pool::Pool;
use crate::worker::Worker;

/// Counters not tied to one replica.
#[derive(Debug, Default)]
pub struct RouterMetrics {
    /// Attempts after the first (a replica failed before its first byte).
    pub retries: AtomicU64,
    /// Cache-aware choices overridden by the balance rule.
    pub balance_overrides: AtomicU64,
}

impl RouterMetrics {
    /// Counts a policy's choice of `w`.
    pub fn chose(&self, w: &Worker, c: &Choice) {
        let n = &w.counters;
        n.chosen.fetch_add(1, Ordering::Relaxed);
        n.prefix_hit_blocks
            .fetch_add(c.matched_blocks as u64, Ordering::Relaxed);
        n.prompt_blocks
            .fetch_add(c.prompt_blocks as u64, Ordering::Relaxed);
        if c.balanced {
            self.balance_overrides.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn retried(&self) {
        self.retries.fetch_add(1, Ordering::Relaxed);
    }

    /// The router's families.
    pub fn render(&self, e: &mut Exposition, pool: &Pool, policy: &str) {
        let workers = pool.workers();
        let per_worker: [PerWorker; 7] = [
            (
                "requests_total",
                "counter",
                "Requests sent to the replica (every attempt).",
                |w| w.counters.requests.load(Ordering::Relaxed),
            ),
            (
                "errors_total",
                "counter",
                "Attempts that failed (before the first byte or mid-stream).",
                |w| w.counters.errors.load(Ordering::Relaxed),
            ),
            (
                "chosen_total",
                "counter",
                "Times the policy chose the replica.",
                |w| w.counters.chosen.load(Ordering::Relaxed),
            ),
            (
                "prefix_hit_blocks_total",
                "counter",
                "Prompt blocks the replica's index held when it was chosen (estimated hits).",
                |w| w.counters.prefix_hit_blocks.load(Ordering::Relaxed),
            ),
            (
                "prompt_blocks_total",
                "counter",
                "Full prompt blocks of the requests the replica was chosen for.",
                |w| w.counters.prompt_blocks.load(Ordering::Relaxed),
            ),
            (
                "in_flight",
                "gauge",
                "Requests the router has in flight on the replica.",
                |w| w.in_flight() as u64,
            ),
            (
                "indexed_blocks",
                "gauge",
                "Blocks the replica's KV events say it caches.",
                |w| w.indexed_blocks() as u64,
            ),
        ];
        for (name, kind, help, get) in per_worker {
            let series = workers.iter().map(|w| {
                let mut labels = worker_labels(w);
                if name == "chosen_total" {
                    labels.push(("policy", policy.to_owned()));
                }
                (labels, get(w).into())
            });
            let family = match kind {
                "counter" => Scraped::counters(series),
                _ => Scraped::gauges(series),
            };
            e.scraped(&format!("pagoda_router:{name}"), help, family);
        }
        e.scraped(
            "pagoda_router:worker_health",
            "1 for the replica's current health.",
            health(&workers),
        );
        for (name, help, v) in [
            (
                "pagoda_router:retries_total",
                "Attempts after a replica failed before its first byte.",
                &self.retries,
            ),
            (
                "pagoda_router:balance_overrides_total",
                "Cache-aware choices overridden because load was skewed.",
                &self.balance_overrides,
            ),
        ] {
            e.counter(name, help, Vec::new(), v.load(Ordering::Relaxed));
        }
    }
}

/// A per-replica series: name, type, help, and how to read it.
type PerWorker = (&'static str, &'static str, &'static str, fn(&Worker) -> u64);

/// The `worker` label: the replica's URL.
fn worker_labels(w: &Worker) -> Labels {
    vec![("worker", w.url().to_owned())]
}

/// A series of value 1 per replica, labelled with its current health.
pub(crate) fn health(workers: &[std::sync::Arc<Worker>]) -> Scraped {
    Scraped::gauges(workers.iter().map(|w| {
        let mut labels = worker_labels(w);
        labels.push(("health", w.health().name().to_owned()));
        (labels, 1u64.into())
    }))
}
