//! The engine thread: drains commands, steps the core, routes outputs to each request's
//! stream. It blocks on its command channel when there is nothing to do (no busy waiting), and
//! a stream whose reader fell too far behind is cut off rather than allowed to stall the rest.

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc::Sender;
use tokio::sync::mpsc::error::TrySendError;

use super::kv_event_queue::KvEventQueue;
use super::step_turns::StepTurns;
use super::stream_error::{StreamError, StreamItem};
use crate::admission::QueueSlots;
use crate::engine_core::EngineCore;
use crate::engine_output::EngineOutput;
use crate::engine_request::RequestId;
use crate::engine_stats::EngineStats;
use crate::executor::ModelExecutor;
use crate::request::FinishReason;
use crate::validation::CheckedRequest;

pub(crate) enum Command {
    /// A checked request with its queue slots (given back by the core as it schedules them).
    Add(
        Box<CheckedRequest>,
        QueueSlots,
        Sender<StreamItem>,
        Arc<AtomicBool>,
    ),
    Abort(RequestId),
    /// Ends one choice of a request (`n > 1`) and leaves the others running.
    AbortChoice(RequestId, u32),
    Shutdown,
}

struct Route {
    tx: Sender<StreamItem>,
    overflowed: Arc<AtomicBool>,
    /// Sequences of the request still running.
    remaining: u32,
}

pub(crate) fn run<E: ModelExecutor>(
    mut core: EngineCore<E>,
    rx: Receiver<Command>,
    stats: Arc<Mutex<EngineStats>>,
    mut kv_events: Option<KvEventQueue>,
    turns: Option<Arc<StepTurns>>,
) {
    let mut routes: HashMap<RequestId, Route> = HashMap::new();
    let mut disconnected = false;
    loop {
        if !core.has_work() {
            if disconnected {
                break;
            }
            publish(&core, &stats);
            match rx.recv() {
                Ok(cmd) => {
                    if !apply(cmd, &mut core, &mut routes) {
                        break;
                    }
                }
                Err(_) => break,
            }
        }
        let mut stop = false;
        loop {
            match rx.try_recv() {
                Ok(cmd) => {
                    if !apply(cmd, &mut core, &mut routes) {
                        stop = true;
                        break;
                    }
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    disconnected = true;
                    break;
                }
            }
        }
        if stop {
            let ids: Vec<RequestId> = routes.keys().copied().collect();
            for id in ids {
                core.abort(id);
                send_error(&mut routes, id, StreamError::Shutdown);
            }
            break;
        }
        if !core.has_work() {
            continue;
        }
        let turn = turns.as_deref().map(StepTurns::take);
        let stepped = catch_unwind(AssertUnwindSafe(|| core.step()));
        drop(turn);
        let outs = match stepped {
            Ok(o) => o,
            Err(_) => {
                // A bug in a kernel or the runner: fail what was in flight, keep serving.
                tracing::error!("engine step panicked; failing in-flight requests");
                let ids: Vec<RequestId> = routes.keys().copied().collect();
                for id in ids {
                    core.abort(id);
                    send_error(
                        &mut routes,
                        id,
                        StreamError::Engine("internal error in the engine step".into()),
                    );
                }
                continue;
            }
        };
        for out in outs {
            deliver(out, &mut core, &mut routes);
        }
        if core.waiting_on_tier() {
            // Only tier reads are pending: wait for them (or a command) without spinning.
            match rx.recv_timeout(std::time::Duration::from_millis(1)) {
                Ok(cmd) => {
                    if !apply(cmd, &mut core, &mut routes) {
                        break;
                    }
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => disconnected = true,
            }
        }
        if let Some(q) = &mut kv_events {
            q.flush(&mut core);
        }
        publish(&core, &stats);
    }
    // The memory cache dies with the process: what the tier lacks of it goes there first.
    core.flush_kv_tier();
    publish(&core, &stats);
}

/// Applies a command; false means shut down.
fn apply<E: ModelExecutor>(
    cmd: Command,
    core: &mut EngineCore<E>,
    routes: &mut HashMap<RequestId, Route>,
) -> bool {
    match cmd {
        Command::Add(req, slots, tx, overflowed) => {
            let id = req.get().id;
            let remaining = req.get().params.n.max(1);
            match core.add_checked(*req, slots) {
                Ok(()) => {
                    routes.insert(
                        id,
                        Route {
                            tx,
                            overflowed,
                            remaining,
                        },
                    );
                }
                Err(e) => {
                    let _ = tx.try_send(Err(StreamError::Rejected(e)));
                }
            }
        }
        Command::Abort(id) => {
            // The reader is gone or stopped on a stop string: free the blocks now.
            core.abort(id);
            routes.remove(&id);
        }
        Command::AbortChoice(id, index) => {
            if let Some(out) = core.abort_choice(id, index) {
                deliver(out, core, routes);
            }
        }
        Command::Shutdown => return false,
    }
    true
}

fn deliver<E: ModelExecutor>(
    out: EngineOutput,
    core: &mut EngineCore<E>,
    routes: &mut HashMap<RequestId, Route>,
) {
    let id = out.request_id;
    let Some(route) = routes.get_mut(&id) else {
        return;
    };
    let finished = out.finish_reason.is_some();
    if let Some(FinishReason::Error(msg)) = &out.finish_reason {
        let msg = msg.clone();
        core.abort(id);
        send_error(routes, id, StreamError::Engine(msg));
        return;
    }
    match route.tx.try_send(Ok(out)) {
        Ok(()) => {}
        Err(TrySendError::Full(_)) => {
            core.abort(id);
            if let Some(r) = routes.remove(&id) {
                // The channel is full, so the error cannot be queued: the flag tells the
                // reader, after the buffered items, that it was cut off.
                r.overflowed.store(true, Ordering::Relaxed);
            }
            return;
        }
        Err(TrySendError::Closed(_)) => {
            core.abort(id);
            routes.remove(&id);
            return;
        }
    }
    if finished {
        route.remaining = route.remaining.saturating_sub(1);
        if route.remaining == 0 {
            routes.remove(&id);
        }
    }
}

fn send_error(routes: &mut HashMap<RequestId, Route>, id: RequestId, err: StreamError) {
    if let Some(r) = routes.remove(&id) {
        let _ = r.tx.try_send(Err(err));
    }
}

fn publish<E: ModelExecutor>(core: &EngineCore<E>, stats: &Mutex<EngineStats>) {
    if let Ok(mut s) = stats.lock() {
        *s = core.stats();
    }
}
