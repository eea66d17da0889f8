//! The accept loop under [`crate::serve`]: one hyper connection per socket (HTTP/1.1 with
//! keep-alive, or h2 with prior knowledge) with TCP_NODELAY, the graceful close on shutdown, and
//! the two slow-client timeouts `axum::serve` lacks, kept per connection by [`Activity`]:
//!
//! ```text
//! accept     head parsed              response sent     first byte   head parsed
//!    |<- header ->|<- in flight: no timer ->|<- keep_alive ->|<- header ->|<- in flight ...
//! ```
//!
//! No timer runs while a request is in flight, so a slow SSE stream is never cut. hyper's own
//! `header_read_timeout` is not used: it is h1-only, it starts as soon as a keep-alive
//! connection goes idle (so it would bound the idle wait too), and it does not run while the
//! auto builder is still sniffing the protocol (a socket that sends nothing stays open).

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, mpsc, watch};
use tokio::time::Instant;
use tower_service::Service;

/// The slow-client limits of every connection.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Timeouts {
    /// From accept (or a keep-alive request's first byte) until its head is read.
    pub header: Duration,
    /// From the end of a response until the next request's first byte.
    pub keep_alive: Duration,
}

/// Accepts on `listener` until `stop` resolves, then stops accepting, asks every connection to
/// finish its in-flight requests and close, and returns once all have closed.
pub(crate) async fn run(
    mut listener: TcpListener,
    router: Router,
    timeouts: Timeouts,
    stop: impl Future<Output = ()>,
) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // Explicitly off (see the module doc), so adding a hyper timer later cannot switch on
    // hyper's 30 s default on top of ours.
    builder.http1().header_read_timeout(None);
    let (closing_tx, closing_rx) = watch::channel(false);
    // Every connection task holds a sender; `recv` yields `None` once all of them have ended.
    let (alive_tx, mut alive_rx) = mpsc::channel::<()>(1);
    tokio::pin!(stop);
    loop {
        let (tcp, peer) = tokio::select! {
            // axum's accept: logs and retries errors (backing off on EMFILE) instead of failing.
            accepted = axum::serve::Listener::accept(&mut listener) => accepted,
            () = &mut stop => break,
        };
        // Small SSE writes must not wait for delayed ACKs (Nagle): ~40 ms on every first token.
        let _ = tcp.set_nodelay(true);
        let conn = connection(
            tcp,
            peer,
            builder.clone(),
            router.clone(),
            timeouts,
            closing_rx.clone(),
        );
        let alive = alive_tx.clone();
        tokio::spawn(async move {
            conn.await;
            drop(alive);
        });
    }
    drop(listener);
    closing_tx.send_replace(true);
    drop(alive_tx);
    let _ = alive_rx.recv().await;
}

/// Serves one connection until the peer closes it, a timeout fires, or `closing` turns true
/// and its in-flight requests are done.
async fn connection(
    tcp: TcpStream,
    peer: SocketAddr,
    builder: auto::Builder<TokioExecutor>,
    router: Router,
    timeouts: Timeouts,
    mut closing: watch::Receiver<bool>,
) {
    let activity = Arc::new(Activity::new(timeouts));
    let io = TokioIo::new(WatchedIo {
        inner: tcp,
        activity: activity.clone(),
    });
    let svc_activity = activity.clone();
    let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
        let guard = RequestGuard::begin(&svc_activity);
        let mut router = router.clone();
        async move {
            std::future::poll_fn(|cx| {
                Service::<hyper::Request<Incoming>>::poll_ready(&mut router, cx)
            })
            .await?;
            let res = router.call(req).await?;
            Ok::<_, Infallible>(res.map(|body| TrackedBody {
                body,
                _guard: guard,
            }))
        }
    });
    let conn = builder.serve_connection(io, service);
    tokio::pin!(conn);
    let mut draining = false;
    loop {
        tokio::select! {
            res = conn.as_mut() => {
                if let Err(e) = res {
                    tracing::debug!(%peer, "connection ended: {e}");
                }
                return;
            }
            _ = closing.wait_for(|c| *c), if !draining => {
                conn.as_mut().graceful_shutdown();
                draining = true;
            }
            why = activity.expired() => {
                // Debug only: a slowloris client must not be able to flood the log.
                tracing::debug!(%peer, "closing the connection: {why}");
                // Nothing is in flight, so dropping the connection loses no response.
                return;
            }
        }
    }
}

/// What a connection is doing, as far as its timeouts care.
struct Activity {
    timeouts: Timeouts,
    state: Mutex<State>,
    /// Signalled when the deadline may have moved earlier (or appeared).
    changed: Notify,
}

struct State {
    /// Requests whose response has not been fully handed to hyper (h2 may have several).
    in_flight: usize,
    /// With nothing in flight: what the connection is waiting for, and since when.
    waiting: Waiting,
}

#[derive(Clone, Copy)]
enum Waiting {
    /// A finished response and no byte since: the keep-alive idle wait.
    NextRequest(Instant),
    /// A fresh connection, or bytes of the next request head have arrived.
    Head(Instant),
}

impl Activity {
    fn new(timeouts: Timeouts) -> Self {
        Self {
            timeouts,
            state: Mutex::new(State {
                in_flight: 0,
                waiting: Waiting::Head(Instant::now()),
            }),
            changed: Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Plain counters and instants: a panic elsewhere leaves nothing half-updated.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn on_read(&self) {
        let mut s = self.lock();
        if s.in_flight == 0
            && let Waiting::NextRequest(_) = s.waiting
        {
            s.waiting = Waiting::Head(Instant::now());
            drop(s);
            self.changed.notify_one();
        }
    }

    /// The tail of a response still flushing to a slow reader is not idleness.
    fn on_write(&self) {
        let mut s = self.lock();
        if s.in_flight == 0
            && let Waiting::NextRequest(_) = s.waiting
        {
            s.waiting = Waiting::NextRequest(Instant::now());
        }
    }

    /// When the connection must be closed, and why; `None` while a request is in flight.
    fn deadline(&self) -> Option<(Instant, &'static str)> {
        let s = self.lock();
        if s.in_flight > 0 {
            return None;
        }
        Some(match s.waiting {
            Waiting::NextRequest(t) => (t + self.timeouts.keep_alive, "keep-alive idle timeout"),
            Waiting::Head(t) => (t + self.timeouts.header, "request header timeout"),
        })
    }

    /// Resolves once the current deadline passes with nothing in flight.
    async fn expired(&self) -> &'static str {
        loop {
            match self.deadline() {
                Some((at, why)) if at <= Instant::now() => return why,
                Some((at, _)) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(at) => {}
                        () = self.changed.notified() => {}
                    }
                }
                None => self.changed.notified().await,
            }
        }
    }
}

/// Counts one request as in flight from the head being parsed until its response body is
/// dropped (sent, or abandoned by a peer that went away).
struct RequestGuard(Arc<Activity>);

impl RequestGuard {
    fn begin(activity: &Arc<Activity>) -> Self {
        activity.lock().in_flight += 1;
        Self(activity.clone())
    }
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        let mut s = self.0.lock();
        s.in_flight = s.in_flight.saturating_sub(1);
        if s.in_flight == 0 {
            s.waiting = Waiting::NextRequest(Instant::now());
            drop(s);
            self.0.changed.notify_one();
        }
    }
}

/// A response body that keeps its request counted as in flight while it lives.
struct TrackedBody {
    body: Body,
    _guard: RequestGuard,
}

impl HttpBody for TrackedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// The socket, reporting each read and write to the connection's [`Activity`].
struct WatchedIo {
    inner: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for WatchedIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let res = Pin::new(&mut this.inner).poll_read(cx, buf);
        if matches!(res, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.activity.on_read();
        }
        res
    }
}

impl AsyncWrite for WatchedIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let res = Pin::new(&mut this.inner).poll_write(cx, buf);
        if matches!(res, Poll::Ready(Ok(n)) if n > 0) {
            this.activity.on_write();
        }
        res
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let res = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        if matches!(res, Poll::Ready(Ok(n)) if n > 0) {
            this.activity.on_write();
        }
        res
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}
