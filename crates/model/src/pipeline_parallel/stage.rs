//! `PpStage`: what a model holds of its pipeline: its stage, its layers, the link to the other
//! stages (timed sends and receives) and the counters; `step.rs` runs a stage's part of a
//! step with it. The forward pass has no error path: a failed link unwinds as the
//! tensor-parallel collective does (`CollectivePanic`).

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::counters::PpCounters;
use super::error::PpError;
use super::stages;
use super::transport::PointToPoint;
use crate::tensor_parallel::CollectiveError;
use crate::tensor_parallel::rank::CollectivePanic;

/// One stage's handle on its pipeline.
pub struct PpStage {
    pub stage: usize,
    pub size: usize,
    /// The layers this stage holds (set when the model is loaded).
    pub layers: Range<usize>,
    link: Arc<dyn PointToPoint>,
    pub(crate) counters: Arc<PpCounters>,
    /// Micro-batches per step; `None`: `micro_batch::count`'s rule.
    pub(crate) micro_batches: Option<usize>,
}

impl PpStage {
    pub fn new(
        stage: usize,
        link: Arc<dyn PointToPoint>,
        counters: Arc<PpCounters>,
        micro_batches: Option<usize>,
    ) -> Self {
        Self {
            stage,
            size: link.size(),
            layers: 0..0,
            link,
            counters,
            micro_batches,
        }
    }

    /// Sets the stage's layers of a model of `n_layers`.
    pub(crate) fn plan_layers(&mut self, n_layers: usize) -> Result<(), PpError> {
        self.layers = stages::layers(n_layers, self.size, self.stage)?;
        Ok(())
    }

    pub fn is_first(&self) -> bool {
        self.stage == 0
    }

    pub fn is_last(&self) -> bool {
        self.stage + 1 == self.size
    }

    /// Fails every stage's waits.
    pub fn abort(&self) {
        self.link.abort();
    }

    /// Sends a copy of `data` to stage `to`, unwinding on a failed link.
    pub(crate) fn send(&self, to: usize, data: &[f32]) {
        let start = Instant::now();
        let sent = self.link.send(self.stage, to, data.to_vec());
        let c = &self.counters;
        c.transfer_nanos
            .fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
        c.transfer_bytes
            .fetch_add(std::mem::size_of_val(data) as u64, Ordering::Relaxed);
        c.transfers.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = sent {
            std::panic::panic_any(CollectivePanic(e));
        }
    }

    /// The next message from stage `from`, which must hold `len` values; unwinds on a failed
    /// link or a message of another length.
    pub(crate) fn recv(&self, from: usize, len: usize) -> Vec<f32> {
        let start = Instant::now();
        let got = self.link.recv(from, self.stage);
        if let Some(w) = self.counters.wait_nanos.get(self.stage) {
            w.fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
        }
        let got = got.and_then(|v| {
            if v.len() == len {
                Ok(v)
            } else {
                Err(CollectiveError::Mismatch(format!(
                    "stage {} expected {len} values from stage {from}, got {}",
                    self.stage,
                    v.len()
                )))
            }
        });
        match got {
            Ok(v) => v,
            Err(e) => std::panic::panic_any(CollectivePanic(e)),
        }
    }
}
