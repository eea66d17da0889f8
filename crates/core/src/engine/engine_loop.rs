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

use super::handle::{Shared, StreamError, StreamItem};
use crate::engine_core::{EngineCore, EngineOutput, EngineRequest, ModelExecutor, RequestId};
use crate::request::FinishReason;

pub(crate) enum Command {
    Add(Box<EngineRequest>, Sender<StreamItem>, Arc<AtomicBool>),
    Abort(RequestId),
    Shutdown,
}

struct Route {
    tx: Sender<StreamItem>,
    overflowed: Arc<AtomicBool>,
    /// Sequences of the request still running.
    remaining: u32,
    admitted: bool,
}

pub(crate) fn run<E: ModelExecutor>(
    mut core: EngineCore<E>,
    rx: Receiver<Command>,
    shared: Arc<Shared>,
) {
    let mut routes: HashMap<RequestId, Route> = HashMap::new();
    let mut disconnected = false;
    loop {
        if !core.has_work() {
            if disconnected {
                break;
            }
            publish(&core, &shared.stats);
            match rx.recv() {
                Ok(cmd) => {
                    if !apply(cmd, &mut core, &mut routes, &shared) {
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
                    if !apply(cmd, &mut core, &mut routes, &shared) {
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
                send_error(&mut routes, &shared, id, StreamError::Shutdown);
            }
            break;
        }
        if !core.has_work() {
            continue;
        }
        let outs = match catch_unwind(AssertUnwindSafe(|| core.step())) {
            Ok(o) => o,
            Err(_) => {
                // A bug in a kernel or the runner: fail what was in flight, keep serving.
                tracing::error!("engine step panicked; failing in-flight requests");
                let ids: Vec<RequestId> = routes.keys().copied().collect();
                for id in ids {
                    core.abort(id);
                    send_error(
                        &mut routes,
                        &shared,
                        id,
                        StreamError::Engine("internal error in the engine step".into()),
                    );
                }
                continue;
            }
        };
        for id in core.take_admitted() {
            if let Some(r) = routes.get_mut(&id)
                && !r.admitted
            {
                r.admitted = true;
                shared.queued.fetch_sub(1, Ordering::Relaxed);
            }
        }
        for out in outs {
            deliver(out, &mut core, &mut routes, &shared);
        }
        publish(&core, &shared.stats);
    }
    publish(&core, &shared.stats);
}

/// Applies a command; false means shut down.
fn apply<E: ModelExecutor>(
    cmd: Command,
    core: &mut EngineCore<E>,
    routes: &mut HashMap<RequestId, Route>,
    shared: &Shared,
) -> bool {
    match cmd {
        Command::Add(req, tx, overflowed) => {
            let id = req.id;
            let n = req.params.n.max(1);
            match core.add_request(*req) {
                Ok(()) => {
                    routes.insert(
                        id,
                        Route {
                            tx,
                            overflowed,
                            remaining: n,
                            admitted: false,
                        },
                    );
                }
                Err(e) => {
                    shared.queued.fetch_sub(1, Ordering::Relaxed);
                    let _ = tx.try_send(Err(StreamError::Rejected(e)));
                }
            }
        }
        Command::Abort(id) => {
            // The reader is gone or stopped on a stop string: free the blocks now.
            core.abort(id);
            if let Some(r) = routes.remove(&id)
                && !r.admitted
            {
                shared.queued.fetch_sub(1, Ordering::Relaxed);
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
    shared: &Shared,
) {
    let id = out.request_id;
    let Some(route) = routes.get_mut(&id) else {
        return;
    };
    let finished = out.finish_reason.is_some();
    if let Some(FinishReason::Error(msg)) = &out.finish_reason {
        let msg = msg.clone();
        core.abort(id);
        send_error(routes, shared, id, StreamError::Engine(msg));
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
                finish_route(&r, shared);
            }
            return;
        }
        Err(TrySendError::Closed(_)) => {
            core.abort(id);
            if let Some(r) = routes.remove(&id) {
                finish_route(&r, shared);
            }
            return;
        }
    }
    if finished {
        route.remaining = route.remaining.saturating_sub(1);
        if route.remaining == 0
            && let Some(r) = routes.remove(&id)
        {
            finish_route(&r, shared);
        }
    }
}

fn finish_route(r: &Route, shared: &Shared) {
    if !r.admitted {
        shared.queued.fetch_sub(1, Ordering::Relaxed);
    }
}

fn send_error(
    routes: &mut HashMap<RequestId, Route>,
    shared: &Shared,
    id: RequestId,
    err: StreamError,
) {
    if let Some(r) = routes.remove(&id) {
        let _ = r.tx.try_send(Err(err));
        finish_route(&r, shared);
    }
}

fn publish<E: ModelExecutor>(core: &EngineCore<E>, stats: &Mutex<crate::EngineStats>) {
    if let Ok(mut s) = stats.lock() {
        *s = core.stats();
    }
}
