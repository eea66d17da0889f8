//! Prefill/decode disaggregation (vLLM's NixlConnector proxy flow): the policy picks a decode
//! replica (one with a `kv=` transfer endpoint); when the part of the prompt it has not
//! cached is at least `--pd-threshold` tokens, a prefill replica first runs the request with
//! `max_tokens: 1` and `kv_transfer_params.do_remote_decode`, shipping the prompt's KV to the
//! decode replica, which then gets the original request with `do_remote_prefill` and imports
//! it. A failed prefill hop sends the original request on, so the decode replica prefills.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use axum::http::{HeaderMap, Method};
use axum::response::Response;
use bytes::Bytes;
use serde_json::{Value, json};

use crate::proxy::{forward, forward_from, with_headers};
use crate::routing_key::RoutingKey;
use crate::state::RouterState;
use crate::worker::{Health, Worker};

/// Routes a generation request through prefill/decode when it is worth it.
pub async fn route(
    state: &RouterState,
    path: &str,
    headers: &HeaderMap,
    body: Bytes,
    key: &RoutingKey,
) -> Response {
    let decoders: Vec<Arc<Worker>> = state
        .pool
        .workers()
        .into_iter()
        .filter(|w| w.spec.kv.is_some() && w.health() == Health::Ready)
        .collect();
    let prefillers: Vec<Arc<Worker>> = state
        .prefill
        .workers()
        .into_iter()
        .filter(|w| w.health() == Health::Ready)
        .collect();
    if decoders.is_empty() || prefillers.is_empty() {
        return forward(state, Method::POST, path, headers, body, key).await;
    }
    let choice = state.policy.select(&decoders, key);
    let d = Arc::clone(&decoders[choice.index]);
    state.metrics.chose(&d, &choice);
    let cached = choice.matched_blocks * d.block_size().max(1);
    let uncached = key.num_tokens().map(|n| n.saturating_sub(cached));
    let pd = &state.pd_metrics;
    if uncached.is_some_and(|n| n < state.pd_threshold) {
        pd.local.fetch_add(1, Ordering::Relaxed);
        return forward_from(
            state,
            Method::POST,
            path,
            headers,
            body.clone(),
            key,
            Some((d, body)),
        )
        .await;
    }
    // The least busy prefill replica.
    let p = prefillers
        .iter()
        .min_by_key(|w| w.load())
        .map(Arc::clone)
        .unwrap_or_else(|| Arc::clone(&prefillers[0]));
    let Some(decode_body) = prefill(state, &p, &d, path, headers, &body).await else {
        pd.prefill_failures.fetch_add(1, Ordering::Relaxed);
        return forward_from(
            state,
            Method::POST,
            path,
            headers,
            body.clone(),
            key,
            Some((d, body)),
        )
        .await;
    };
    pd.remote.fetch_add(1, Ordering::Relaxed);
    forward_from(
        state,
        Method::POST,
        path,
        headers,
        body,
        key,
        Some((d, decode_body)),
    )
    .await
}

/// Runs the prefill hop on `p`, shipping to `d`; the decode replica's body on success.
async fn prefill(
    state: &RouterState,
    p: &Arc<Worker>,
    d: &Worker,
    path: &str,
    headers: &HeaderMap,
    body: &Bytes,
) -> Option<Bytes> {
    let Ok(Value::Object(original)) = serde_json::from_slice::<Value>(body) else {
        return None; // the decode replica answers the malformed request itself
    };
    let kv = d.spec.kv.as_deref()?;
    let (host, port) = kv.rsplit_once(':')?;
    let port: u16 = port.parse().ok()?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let id = transfer_id();
    let mut first = original.clone();
    for k in [
        "stream_options",
        "max_completion_tokens",
        "logprobs",
        "top_logprobs",
    ] {
        first.remove(k);
    }
    first.insert("max_tokens".into(), json!(1));
    first.insert("stream".into(), json!(false));
    first.insert("n".into(), json!(1));
    first.insert(
        "kv_transfer_params".into(),
        json!({"do_remote_decode": true, "transfer_id": id,
               "remote_host": host, "remote_port": port}),
    );
    let started = Instant::now();
    let _guard = p.start();
    let req = state
        .client
        .post(format!("{}{path}", p.url()))
        .timeout(state.pd_prefill_timeout)
        .header("content-type", "application/json")
        .body(Value::Object(first).to_string());
    // The body is rewritten JSON whatever the client sent.
    let answer = with_headers(state, req, headers, Some("content-type"))
        .send()
        .await;
    let ok = match answer {
        Ok(r) if r.status().is_success() => r.bytes().await.is_ok(),
        Ok(r) => {
            tracing::warn!(worker = p.url(), status = %r.status(), "prefill hop refused");
            false
        }
        Err(e) => {
            p.counters.errors.fetch_add(1, Ordering::Relaxed);
            if e.is_connect() {
                p.set_health(Health::Down);
            }
            tracing::warn!(worker = p.url(), "prefill hop failed: {e}");
            false
        }
    };
    state
        .pd_metrics
        .prefill_micros
        .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
    if !ok {
        return None;
    }
    let mut second = original;
    second.insert(
        "kv_transfer_params".into(),
        json!({"do_remote_prefill": true, "transfer_id": id}),
    );
    Some(Bytes::from(Value::Object(second).to_string()))
}

/// A transfer id unique to this router process and, with the start time, across restarts.
fn transfer_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    static START: std::sync::OnceLock<u128> = std::sync::OnceLock::new();
    let start = START.get_or_init(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    });
    format!("pd-{start:x}-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}
