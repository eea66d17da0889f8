//! The disk tier of the prefix cache on `/metrics` (`--kv-disk-dir`): whether it is on, prefix
//! lookups that found blocks on disk or not, blocks and bytes written, read and dropped (the
//! writer's queue was full), and what the store holds now.

use pagoda_core::kv::KvTierStats;
use pagoda_exposition::Exposition;

use crate::observe::metrics::labels::model_labels;

pub(crate) fn render(e: &mut Exposition, model_name: &str, s: &KvTierStats) {
    e.gauge(
        "pagoda:kv_disk_enabled",
        "1 while the disk tier of the prefix cache is on (a full disk turns it off).",
        model_labels(model_name),
        u64::from(s.enabled),
    );
    for (name, help, v) in [
        (
            "pagoda:kv_disk_hits_total",
            "Blocks past a memory prefix hit found on disk and read back.",
            s.hits,
        ),
        (
            "pagoda:kv_disk_misses_total",
            "Blocks past a memory prefix hit not on disk (or not worth reading).",
            s.misses,
        ),
        (
            "pagoda:kv_disk_blocks_written_total",
            "KV blocks written to disk.",
            s.blocks_written,
        ),
        (
            "pagoda:kv_disk_blocks_read_total",
            "KV blocks read back from disk.",
            s.blocks_read,
        ),
        (
            "pagoda:kv_disk_blocks_dropped_total",
            "Evicted blocks not written (writer queue full, or the tier off).",
            s.blocks_dropped,
        ),
        (
            "pagoda:kv_disk_bytes_written_total",
            "Bytes of block files written.",
            s.bytes_written,
        ),
        (
            "pagoda:kv_disk_bytes_read_total",
            "Bytes of block payloads read back.",
            s.bytes_read,
        ),
    ] {
        e.counter(name, help, model_labels(model_name), v);
    }
    e.gauge(
        "pagoda:kv_disk_blocks",
        "Block files on disk now.",
        model_labels(model_name),
        s.blocks_stored,
    );
    e.gauge(
        "pagoda:kv_disk_bytes",
        "Bytes of block files on disk now.",
        model_labels(model_name),
        s.bytes_stored,
    );
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_series_carries_its_value() {
        let s = pagoda_core::kv::KvTierStats {
            enabled: true,
            hits: 3,
            blocks_read: 3,
            blocks_dropped: 2,
            bytes_stored: 4096,
            ..Default::default()
        };
        let mut e = pagoda_exposition::Exposition::new();
        super::render(&mut e, "m", &s);
        let out = e.encode();
        for line in [
            "pagoda:kv_disk_enabled{model_name=\"m\"} 1",
            "pagoda:kv_disk_hits_total{model_name=\"m\"} 3",
            "pagoda:kv_disk_blocks_read_total{model_name=\"m\"} 3",
            "pagoda:kv_disk_blocks_dropped_total{model_name=\"m\"} 2",
            "pagoda:kv_disk_bytes{model_name=\"m\"} 4096",
            "# TYPE pagoda:kv_disk_misses_total counter",
        ] {
            assert!(out.lines().any(|l| l == line), "{line} missing in\n{out}");
        }
    }
}
