//! The engine thread's end of KV cache events: after each step it moves the step's events onto
//! a bounded queue with `try_send`, never waiting on the publisher. A full queue drops the
//! step's events, counts it, and the next step that finds room sends a resync instead.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::mpsc::{self, Receiver, Sender, error::TrySendError};

use crate::engine_core::EngineCore;
use crate::executor::ModelExecutor;
use crate::kv::KvEvent;

/// One step's events (vLLM's `KVEventBatch`).
#[derive(Clone, Debug, PartialEq)]
pub struct KvEventBatch {
    /// Seconds since the Unix epoch.
    pub ts: f64,
    pub events: Vec<KvEvent>,
}

/// The sending side, owned by the engine thread.
#[derive(Debug)]
pub struct KvEventQueue {
    tx: Sender<KvEventBatch>,
    overflows: Arc<AtomicU64>,
    resync: bool,
}

/// A queue of `capacity` batches; the counter reads how many batches were dropped.
pub fn kv_event_queue(capacity: usize) -> (KvEventQueue, Receiver<KvEventBatch>, Arc<AtomicU64>) {
    let (tx, rx) = mpsc::channel(capacity.max(1));
    let overflows = Arc::new(AtomicU64::new(0));
    let queue = KvEventQueue {
        tx,
        overflows: Arc::clone(&overflows),
        resync: false,
    };
    (queue, rx, overflows)
}

impl KvEventQueue {
    /// Moves `core`'s pending events onto the queue (or a resync, after an overflow).
    pub fn flush<E: ModelExecutor>(&mut self, core: &mut EngineCore<E>) {
        if self.resync {
            if self.tx.capacity() == 0 {
                // Still full: this step's events are covered by the resync to come.
                drop(core.take_kv_events());
                return;
            }
            self.resync = false;
            self.send(core.kv_resync_events());
            return;
        }
        let events = core.take_kv_events();
        if !events.is_empty() {
            self.send(events);
        }
    }

    fn send(&mut self, events: Vec<KvEvent>) {
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        match self.tx.try_send(KvEventBatch { ts, events }) {
            Ok(()) | Err(TrySendError::Closed(_)) => {}
            Err(TrySendError::Full(_)) => {
                self.overflows.fetch_add(1, Ordering::Relaxed);
                self.resync = true;
            }
        }
    }
}
