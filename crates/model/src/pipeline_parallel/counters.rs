//! `PpCounters`: what the pipeline's hand-offs cost, read by `/metrics`: bytes and time of the
//! transfers between stages (the residual stream forward, the last stage's logits back to rank
//! 0), and each stage's time waiting for its input (fill and drain bubbles, and a slower
//! neighbour, included).

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters shared by every stage of one pipeline.
#[derive(Debug, Default)]
pub struct PpCounters {
    /// Time sending (the copy into the link), all stages.
    pub transfer_nanos: AtomicU64,
    pub transfer_bytes: AtomicU64,
    pub transfers: AtomicU64,
    /// Micro-batches run (counted once, on stage 0).
    pub micro_batches: AtomicU64,
    /// Steps run (counted once, on stage 0).
    pub steps: AtomicU64,
    /// Per stage: time waiting for its input (rank 0: for the last stage's logits too).
    pub wait_nanos: Vec<AtomicU64>,
}

impl PpCounters {
    pub fn new(stages: usize) -> Self {
        Self {
            wait_nanos: (0..stages).map(|_| AtomicU64::new(0)).collect(),
            ..Self::default()
        }
    }

    pub fn transfer_seconds(&self) -> f64 {
        self.transfer_nanos.load(Ordering::Relaxed) as f64 * 1e-9
    }

    /// Stage `stage`'s waiting time, in seconds.
    pub fn wait_seconds(&self, stage: usize) -> f64 {
        self.wait_nanos
            .get(stage)
            .map_or(0.0, |n| n.load(Ordering::Relaxed) as f64 * 1e-9)
    }
}
