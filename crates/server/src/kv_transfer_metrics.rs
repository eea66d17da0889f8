//! Prefill/decode disaggregation on `/metrics` (`--kv-role prefill|decode`): blocks and bytes
//! sent and received, failed transfers, decode requests that fell back to a local prefill,
//! transfers in flight and the received blocks waiting to be claimed.

use std::sync::atomic::Ordering;

use pagoda_model::KvTransferCounters;

use crate::metrics::counter;

pub(crate) fn render(out: &mut String, label: &str, role: &str, c: &KvTransferCounters) {
    use std::fmt::Write;
    let get = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let _ = writeln!(
        out,
        "# HELP pagoda:kv_transfer_role_info This replica's --kv-role.\n# TYPE pagoda:kv_transfer_role_info gauge\npagoda:kv_transfer_role_info{{{label},role=\"{role}\"}} 1"
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
            "pagoda:kv_transfer_fallbacks_total",
            "Decode requests that prefilled locally: their transfer failed or timed out.",
            get(&c.fallbacks),
        ),
    ] {
        counter(out, name, help, label, v);
    }
    let secs = get(&c.receive_micros) as f64 / 1e6;
    let _ = writeln!(
        out,
        "# HELP pagoda:kv_transfer_receive_seconds_total Time from transfers' first to last frame (bytes received / this = throughput).\n# TYPE pagoda:kv_transfer_receive_seconds_total counter\npagoda:kv_transfer_receive_seconds_total{{{label}}} {secs}"
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
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} gauge\n{name}{{{label}}} {v}"
        );
    }
}
