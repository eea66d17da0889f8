//! Prefill/decode disaggregation on `/metrics` (`--kv-role prefill|decode`): blocks and bytes
//! sent and received, failed transfers, decode requests that fell back to a local prefill,
//! transfers in flight and the received blocks waiting to be claimed.

use std::sync::atomic::{AtomicU64, Ordering};

use pagoda_exposition::Exposition;
use pagoda_model::KvTransferCounters;

use crate::observe::metrics::labels::model_labels;

pub(crate) fn render(e: &mut Exposition, model_name: &str, role: &str, c: &KvTransferCounters) {
    let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let mut role_labels = model_labels(model_name);
    role_labels.push(("role", role.to_owned()));
    e.gauge(
        "pagoda:kv_transfer_role_info",
        "This replica's --kv-role.",
        role_labels,
        1u64,
    );
    for (name, help, v) in [
        (
            "pagoda:kv_transfer_blocks_sent_total",
            "KV blocks sent to decode replicas.",
            get(&c.blocks_sent),
        ),
        (
            "pagoda:kv_transfer_bytes_sent_total",
            "Bytes of KV block payloads sent.",
            get(&c.bytes_sent),
        ),
        (
            "pagoda:kv_transfer_send_failures_total",
            "Transfers that could not be sent (connection, timeout, full queue).",
            get(&c.sends_failed),
        ),
        (
            "pagoda:kv_transfer_blocks_received_total",
            "KV blocks received from prefill replicas.",
            get(&c.blocks_received),
        ),
        (
            "pagoda:kv_transfer_bytes_received_total",
            "Bytes of KV block payloads received.",
            get(&c.bytes_received),
        ),
        (
            "pagoda:kv_transfer_receive_failures_total",
            "Transfers refused or cut off (checksum, layout, truncation, full buffer).",
            get(&c.receives_failed),
        ),
        (
            "pagoda:kv_transfer_auth_failures_total",
            "Connections refused for authentication: no or a wrong secret, a replayed handshake, a tampered or replayed frame (also counted as receive or send failures).",
            get(&c.auth_failures),
        ),
        (
            "pagoda:kv_transfer_fallbacks_total",
            "Decode requests that prefilled locally: their transfer failed or timed out.",
            get(&c.fallbacks),
        ),
    ] {
        e.counter(name, help, model_labels(model_name), v);
    }
    e.counter(
        "pagoda:kv_transfer_receive_seconds_total",
        "Time from transfers' first to last frame (bytes received / this = throughput).",
        model_labels(model_name),
        get(&c.receive_micros) as f64 / 1e6,
    );
    for (name, help, v) in [
        (
            "pagoda:kv_transfer_in_flight",
            "Transfers being sent or received now.",
            c.in_flight.load(Ordering::Relaxed).max(0) as u64,
        ),
        (
            "pagoda:kv_transfer_buffered_blocks",
            "Received KV blocks not yet claimed by a request.",
            get(&c.buffered_blocks),
        ),
        (
            "pagoda:kv_transfer_buffered_bytes",
            "Bytes of received KV blocks not yet claimed.",
            get(&c.buffered_bytes),
        ),
    ] {
        e.gauge(name, help, model_labels(model_name), v);
    }
}
