//! Sending one request to a replica and its answer back. The policy picks among the replicas
//! that take requests; a failure before the replica's first byte (refused or dropped
//! connection, a 503 from a draining replica) is retried on another one. After the first
//! byte the body is passed through chunk by chunk as it arrives (never buffered); if the
//! replica dies mid-stream an SSE stream ends with one OpenAI error event (never a hang).

use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::StreamExt;
use pagoda_api_keys::ROUTER_KEY_HEADER;
use pagoda_protocol::ErrorResponse;
use pagoda_protocol::sse::encode_error;

use crate::error::RouteError;
use crate::routing_key::RoutingKey;
use crate::state::RouterState;
use crate::worker::{Health, InFlight, Worker};

/// Request headers a replica needs (auth, tracing, ids).
const FORWARDED: [&str; 7] = [
    "content-type",
    "accept",
    "authorization",
    "x-api-key",
    "x-request-id",
    "traceparent",
    "tracestate",
];
/// Response headers passed back.
const RETURNED: [&str; 5] = [
    "content-type",
    "cache-control",
    "x-request-id",
    "retry-after",
    "x-accel-buffering",
];
/// The header naming the replica that served the request.
pub const WORKER_HEADER: &str = "x-pagoda-worker";

/// Sends `method path` with `body` to a replica chosen for `key`, retrying before the first
/// byte on the others.
pub async fn forward(
    state: &RouterState,
    method: Method,
    path: &str,
    headers: &HeaderMap,
    body: Bytes,
    key: &RoutingKey,
) -> Response {
    forward_from(state, method, path, headers, body, key, None).await
}

/// As `forward`, but the first attempt goes to `first`'s replica with `first`'s body (the
/// decode hop of prefill/decode disaggregation); retries send `body` by the policy.
pub async fn forward_from(
    state: &RouterState,
    method: Method,
    path: &str,
    headers: &HeaderMap,
    body: Bytes,
    key: &RoutingKey,
    mut first: Option<(Arc<Worker>, Bytes)>,
) -> Response {
    let mut tried: Vec<Arc<Worker>> = Vec::new();
    let mut last_error = String::new();
    loop {
        if let Some((w, b)) = first.take() {
            tried.push(Arc::clone(&w));
            match attempt(state, &method, path, headers, b, &w, &mut last_error).await {
                Ok(r) => return r,
                Err(()) => continue,
            }
        }
        let candidates: Vec<Arc<Worker>> = state
            .pool
            .workers()
            .into_iter()
            .filter(|w| w.accepts() && !tried.iter().any(|t| Arc::ptr_eq(t, w)))
            .collect();
        // Replicas confirmed ready first; ones not polled yet only when nothing else is left.
        let ready: Vec<Arc<Worker>> = candidates
            .iter()
            .filter(|w| w.health() == Health::Ready)
            .cloned()
            .collect();
        let candidates = if ready.is_empty() { candidates } else { ready };
        if candidates.is_empty() {
            return if tried.is_empty() {
                RouteError::NoReplica.into_response()
            } else {
                RouteError::AllFailed(last_error).into_response()
            };
        }
        let choice = state.policy.select(&candidates, key);
        let w = Arc::clone(&candidates[choice.index]);
        state.metrics.chose(&w, &choice);
        if !tried.is_empty() {
            state.metrics.retried();
        }
        tried.push(Arc::clone(&w));
        let others = state
            .pool
            .workers()
            .iter()
            .any(|o| o.accepts() && !tried.iter().any(|t| Arc::ptr_eq(t, o)));
        let last = !others;
        match attempt_or_last(
            state,
            &method,
            path,
            headers,
            body.clone(),
            &w,
            &mut last_error,
            last,
        )
        .await
        {
            Ok(r) => return r,
            Err(()) => continue,
        }
    }
}

/// One try on `w`: its answer, or `Err` when it failed before the first byte and another
/// replica may take the request (`last_error` says why).
async fn attempt(
    state: &RouterState,
    method: &Method,
    path: &str,
    headers: &HeaderMap,
    body: Bytes,
    w: &Arc<Worker>,
    last_error: &mut String,
) -> Result<Response, ()> {
    attempt_or_last(state, method, path, headers, body, w, last_error, false).await
}

/// As `attempt`; when `last`, a 503 is passed back rather than retried.
#[allow(clippy::too_many_arguments)]
async fn attempt_or_last(
    state: &RouterState,
    method: &Method,
    path: &str,
    headers: &HeaderMap,
    body: Bytes,
    w: &Arc<Worker>,
    last_error: &mut String,
    last: bool,
) -> Result<Response, ()> {
    let guard = w.start();
    let req = state
        .client
        .request(method.clone(), format!("{}{path}", w.url()))
        .body(body);
    match with_headers(state, req, headers, None).send().await {
        Err(e) => {
            w.counters
                .errors
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if e.is_connect() || e.is_timeout() {
                w.set_health(Health::Down);
            }
            tracing::warn!(
                worker = w.url(),
                "request failed before the first byte: {e}"
            );
            *last_error = format!("{}: {e}", w.url());
            Err(())
        }
        Ok(r) if r.status() == StatusCode::SERVICE_UNAVAILABLE => {
            // Draining or loading: it took nothing on; another replica may.
            w.set_health(Health::Draining);
            *last_error = format!("{}: 503", w.url());
            if last {
                Ok(passthrough(r, guard))
            } else {
                Err(())
            }
        }
        Ok(r) => Ok(passthrough(r, guard)),
    }
}

/// `req` with the client's headers a replica needs (but `except`, which the caller sets) and
/// the router's own key (`--router-key`, in `x-pagoda-router-key`; a client's header of that
/// name is never passed on): every request to a replica, the prefill hop's too, goes
/// through here.
pub(crate) fn with_headers(
    state: &RouterState,
    mut req: reqwest::RequestBuilder,
    headers: &HeaderMap,
    except: Option<&str>,
) -> reqwest::RequestBuilder {
    for name in FORWARDED.into_iter().filter(|n| Some(*n) != except) {
        if let Some(v) = headers.get(name) {
            req = req.header(name, v);
        }
    }
    if let Some(k) = &state.router_key {
        req = req.header(ROUTER_KEY_HEADER, k.clone());
    }
    req
}

/// The replica's answer as the client's: status, the useful headers, the body as it comes.
fn passthrough(r: reqwest::Response, guard: InFlight) -> Response {
    let mut headers = HeaderMap::new();
    for name in RETURNED {
        if let Some(v) = r.headers().get(name) {
            headers.insert(HeaderName::from_static(name), v.clone());
        }
    }
    if let Ok(v) = HeaderValue::from_str(guard.worker().url()) {
        headers.insert(HeaderName::from_static(WORKER_HEADER), v);
    }
    let sse = r
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    let status = r.status();
    let chunks = r.bytes_stream();
    // State: the replica's chunks, the in-flight guard (dropped with the stream), ended.
    let body = futures_util::stream::unfold(
        (chunks, Some(guard)),
        move |(mut chunks, guard)| async move {
            let g = guard?;
            match chunks.next().await {
                Some(Ok(b)) => Some((Ok::<Bytes, std::io::Error>(b), (chunks, Some(g)))),
                None => None,
                Some(Err(e)) => {
                    let w = g.worker();
                    w.counters
                        .errors
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    tracing::warn!(worker = w.url(), "replica failed mid-response: {e}");
                    if sse {
                        let err = ErrorResponse::server_error(format!(
                            "the replica serving this stream failed: {e}"
                        ));
                        Some((Ok(Bytes::from(encode_error(&err))), (chunks, None)))
                    } else {
                        Some((Err(std::io::Error::other(e)), (chunks, None)))
                    }
                }
            }
        },
    );
    (status, headers, Body::from_stream(body)).into_response()
}
