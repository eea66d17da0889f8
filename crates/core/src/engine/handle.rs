//! `EngineHandle`: the thread-safe front of the engine thread. Submitting takes checked requests
//! and their queue slots at once (so the caller can answer 400 or 429 before streaming) and
//! returns a `RequestStream` each; dropping a stream before it ends aborts the request, so a
//! client that goes away frees its KV blocks within a step.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use tokio::sync::mpsc as tmpsc;

use super::engine_loop::{self, Command};
use super::kv_event_queue::KvEventQueue;
use super::step_turns::StepTurns;
use super::stream_error::{StreamError, StreamItem};
use crate::admission::Admission;
use crate::slo::SloGate;
use crate::validation::{CheckedRequest, RequestLimits};
use crate::{EngineCore, EngineOutput, EngineRequest, EngineStats, ModelExecutor, RequestId};

/// How the engine thread runs.
#[derive(Clone)]
pub struct HandleOptions {
    /// Outputs buffered per request before a slow reader is cut off.
    pub output_buffer: usize,
    /// The turns of the models sharing the machine: each step waits for one (`None`: a lone
    /// engine, which never waits).
    pub turns: Option<Arc<StepTurns>>,
}

impl Default for HandleOptions {
    fn default() -> Self {
        Self {
            output_buffer: 4096,
            turns: None,
        }
    }
}

/// The way in to a running engine. Cheap to share behind an `Arc`.
pub struct EngineHandle {
    tx: Mutex<mpsc::Sender<Command>>,
    /// The engine's counters as of its last step, published by the engine thread.
    stats: Arc<Mutex<EngineStats>>,
    next_id: AtomicU64,
    admission: Arc<Admission>,
    /// The SLO policy's door (`--slo ttft=..`), checked before a request takes its slots.
    slo_gate: Option<Arc<SloGate>>,
    limits: RequestLimits,
    options: HandleOptions,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl EngineHandle {
    /// Moves `core` onto a new thread named `pagoda-engine` and returns its handle.
    pub fn start<E: ModelExecutor + Send + 'static>(
        core: EngineCore<E>,
        options: HandleOptions,
    ) -> std::io::Result<Self> {
        Self::start_with_events(core, options, None)
    }

    /// The same, publishing the prefix cache's changes after every step onto `kv_events`.
    pub fn start_with_events<E: ModelExecutor + Send + 'static>(
        mut core: EngineCore<E>,
        options: HandleOptions,
        kv_events: Option<KvEventQueue>,
    ) -> std::io::Result<Self> {
        if kv_events.is_some() {
            core.enable_kv_events();
        }
        let (tx, rx) = mpsc::channel();
        let stats = Arc::new(Mutex::new(core.stats()));
        let admission = Arc::clone(core.admission());
        let slo_gate = core.slo_gate().cloned();
        let limits = core.limits();
        let thread_stats = Arc::clone(&stats);
        let thread = std::thread::Builder::new()
            .name("pagoda-engine".into())
            .spawn({
                let turns = options.turns.clone();
                move || engine_loop::run(core, rx, thread_stats, kv_events, turns)
            })?;
        Ok(Self {
            tx: Mutex::new(tx),
            stats,
            next_id: AtomicU64::new(1),
            admission,
            slo_gate,
            limits,
            options,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// The model's context length as the engine enforces it.
    pub fn max_model_len(&self) -> usize {
        self.limits.max_model_len
    }

    /// What the engine accepts; check requests with it before [`Self::submit`].
    pub fn limits(&self) -> RequestLimits {
        self.limits
    }

    /// Checks `req` and submits it alone; `req.id` is replaced by a fresh id. For the server's
    /// own requests (the warm-up): the SLO policy's door is for clients, not for them.
    pub fn add_request(&self, req: EngineRequest) -> Result<RequestStream, StreamError> {
        let req = self
            .limits
            .check(req)
            .map_err(|e| StreamError::Rejected(e.into()))?;
        let mut streams = self.enqueue(vec![req])?;
        streams.pop().ok_or(StreamError::Shutdown)
    }

    /// Queues checked requests together: their queue slots (one per sequence, `n` per request)
    /// are taken all at once or not at all, so a refused batch leaves nothing queued. Each
    /// request gets a fresh id and a stream, in order.
    /// With `--slo`, a request predicted to miss its TTFT target is refused first.
    pub fn submit(&self, reqs: Vec<CheckedRequest>) -> Result<Vec<RequestStream>, StreamError> {
        if let Some(gate) = &self.slo_gate {
            let seqs = reqs.iter().map(|r| r.get().params.n.max(1) as usize).sum();
            let tokens = reqs.iter().map(|r| r.get().prompt_token_ids.len()).sum();
            gate.check(tokens, seqs).map_err(StreamError::Rejected)?;
        }
        self.enqueue(reqs)
    }

    fn enqueue(&self, reqs: Vec<CheckedRequest>) -> Result<Vec<RequestStream>, StreamError> {
        let total = reqs.iter().map(|r| r.get().params.n.max(1) as usize).sum();
        let mut slots = self
            .admission
            .reserve(total)
            .map_err(StreamError::Rejected)?;
        let cmd_tx = self.sender()?;
        let mut streams = Vec::with_capacity(reqs.len());
        for mut req in reqs {
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            req.set_id(id);
            let n = req.get().params.n.max(1);
            let (otx, orx) = tmpsc::channel(self.options.output_buffer.max(1));
            let overflowed = Arc::new(AtomicBool::new(false));
            let share = slots.split(n as usize);
            let cmd = Command::Add(Box::new(req), share, otx, Arc::clone(&overflowed));
            // A failed send drops the command with its slots; the streams made so far abort.
            cmd_tx.send(cmd).map_err(|_| StreamError::Shutdown)?;
            streams.push(RequestStream {
                id,
                rx: orx,
                overflowed,
                buffer: self.options.output_buffer,
                remaining: n,
                done: false,
                cmd_tx: cmd_tx.clone(),
            });
        }
        Ok(streams)
    }

    /// Ends request `id` (its blocks are freed in the engine's next step).
    pub fn abort(&self, id: RequestId) {
        if let Ok(tx) = self.sender() {
            let _ = tx.send(Command::Abort(id));
        }
    }

    /// The engine's counters as of its last step.
    pub fn stats(&self) -> EngineStats {
        self.stats.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Sequences waiting for their first step.
    pub fn num_queued(&self) -> usize {
        self.admission.waiting()
    }

    /// Aborts everything in flight, stops the thread and waits for it.
    pub fn shutdown(&self) {
        if let Ok(tx) = self.sender() {
            let _ = tx.send(Command::Shutdown);
        }
        if let Ok(mut t) = self.thread.lock()
            && let Some(t) = t.take()
        {
            let _ = t.join();
        }
    }

    fn sender(&self) -> Result<mpsc::Sender<Command>, StreamError> {
        self.tx
            .lock()
            .map(|t| t.clone())
            .map_err(|_| StreamError::Shutdown)
    }
}

impl Drop for EngineHandle {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// One request's outputs, in order. Dropping it before the end aborts the request.
pub struct RequestStream {
    id: RequestId,
    rx: tmpsc::Receiver<StreamItem>,
    overflowed: Arc<AtomicBool>,
    buffer: usize,
    /// Sequences not finished yet.
    remaining: u32,
    done: bool,
    cmd_tx: mpsc::Sender<Command>,
}

impl RequestStream {
    pub fn id(&self) -> RequestId {
        self.id
    }

    /// The next output; `None` after the last one.
    pub async fn recv(&mut self) -> Option<Result<EngineOutput, StreamError>> {
        if self.done {
            return None;
        }
        let item = self.rx.recv().await;
        self.track(item)
    }

    /// [`Self::recv`] for threads outside an async runtime.
    pub fn blocking_recv(&mut self) -> Option<Result<EngineOutput, StreamError>> {
        if self.done {
            return None;
        }
        let item = self.rx.blocking_recv();
        self.track(item)
    }

    fn track(&mut self, item: Option<StreamItem>) -> Option<StreamItem> {
        match item {
            Some(Ok(out)) => {
                if out.finish_reason.is_some() {
                    self.remaining = self.remaining.saturating_sub(1);
                    if self.remaining == 0 {
                        self.done = true;
                    }
                }
                Some(Ok(out))
            }
            Some(Err(e)) => {
                self.done = true;
                Some(Err(e))
            }
            None => {
                self.done = true;
                if self.overflowed.load(Ordering::Relaxed) {
                    Some(Err(StreamError::Overflow(self.buffer)))
                } else {
                    Some(Err(StreamError::Shutdown))
                }
            }
        }
    }

    /// Ends choice `index` alone (a stop string matched in it); its final output (finish
    /// reason `Abort`) still arrives on this stream, after any already buffered.
    pub fn abort_choice(&self, index: u32) {
        if !self.done {
            let _ = self.cmd_tx.send(Command::AbortChoice(self.id, index));
        }
    }

    /// Ends the request now (for example when a stop string matched).
    pub fn abort(&mut self) {
        if !self.done {
            self.done = true;
            let _ = self.cmd_tx.send(Command::Abort(self.id));
        }
    }
}

impl Drop for RequestStream {
    fn drop(&mut self) {
        self.abort();
    }
}
