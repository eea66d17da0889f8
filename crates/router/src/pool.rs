//! The set of replicas: fixed (`--worker`) or kept in step with DNS (`--worker-dns`), each
//! with its KV-event follower, which feeds its index and clears it when the replica restarts.

use std::collections::HashSet;
use std::sync::{Arc, RwLock};

use pagoda_kv_events::{SubscriberEvent, subscribe};

use crate::config::{DnsWorkers, WorkerSpec};
use crate::worker::Worker;

/// The replicas, in the order they were added.
#[derive(Debug, Default)]
pub struct Pool {
    workers: RwLock<Vec<Arc<Worker>>>,
}

impl Pool {
    /// A snapshot of the replicas.
    pub fn workers(&self) -> Vec<Arc<Worker>> {
        self.workers.read().map(|w| w.clone()).unwrap_or_default()
    }

    /// The content digest of LoRA adapter `name`, from the first replica serving it (a
    /// digest is of the adapter's bytes, so replicas loading the same adapter agree).
    pub fn adapter_digest(&self, name: &str) -> Option<u64> {
        self.workers().iter().find_map(|w| w.adapter_digest(name))
    }

    /// Adds `spec` unless a replica of that URL is there; starts following its events (needs
    /// a tokio runtime).
    pub fn add(&self, spec: WorkerSpec) {
        let Ok(mut ws) = self.workers.write() else {
            return;
        };
        if ws.iter().any(|w| w.spec.url == spec.url) {
            return;
        }
        let w = Arc::new(Worker::new(spec));
        follow_events(&w);
        tracing::info!(worker = w.url(), "replica added");
        ws.push(w);
    }

    /// Makes the pool exactly `specs` (DNS answered with these addresses).
    pub fn sync(&self, specs: Vec<WorkerSpec>) {
        let urls: HashSet<&str> = specs.iter().map(|s| s.url.as_str()).collect();
        if let Ok(mut ws) = self.workers.write() {
            ws.retain(|w| {
                let keep = urls.contains(w.url());
                if !keep {
                    tracing::info!(worker = w.url(), "replica gone from DNS");
                    w.retire();
                }
                keep
            });
        }
        for s in specs {
            self.add(s);
        }
    }
}

/// Applies the replica's KV events to its index until it is retired.
fn follow_events(w: &Arc<Worker>) {
    let Some(to) = w.spec.events.clone() else {
        return;
    };
    let mut rx = subscribe(to);
    let mut retired = w.retired();
    let weak = Arc::downgrade(w);
    tokio::spawn(async move {
        loop {
            let ev = tokio::select! {
                ev = rx.recv() => ev,
                _ = retired.changed() => return,
            };
            let (Some(ev), Some(w)) = (ev, weak.upgrade()) else {
                return;
            };
            let Ok(mut ix) = w.index.lock() else { return };
            match ev {
                SubscriberEvent::Batch(b) => b.events.iter().for_each(|e| ix.apply(e)),
                SubscriberEvent::Reset => ix.clear(),
            }
        }
    });
}

/// Resolves `dns` every `dns.interval` and syncs the pool; a failed lookup keeps the replicas
/// known (a DNS hiccup must not empty the pool).
pub async fn follow_dns(pool: std::sync::Weak<Pool>, dns: DnsWorkers) {
    loop {
        let Some(p) = pool.upgrade() else { return };
        match tokio::net::lookup_host((dns.name.as_str(), dns.port)).await {
            Ok(addrs) => {
                let mut ips: Vec<_> = addrs.map(|a| a.ip()).collect();
                ips.sort();
                ips.dedup();
                p.sync(ips.into_iter().map(|ip| dns.worker(ip)).collect());
            }
            Err(e) => tracing::warn!(name = dns.name, "cannot resolve the replicas: {e}"),
        }
        drop(p);
        tokio::time::sleep(dns.interval).await;
    }
}
