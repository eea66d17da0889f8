//! Prometheus text exposition of the server's metrics, named like vLLM's (`vllm:` becomes
//! `pagoda:`): latency and length histograms observed per request here, gauges and token
//! counters read from the engine's stats at scrape time. pagoda-exposition writes the text.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use pagoda_core::EngineStats;
use pagoda_exposition::{Exposition, Histogram, Scraped};

use crate::observe::metrics::labels::model_labels;

/// vLLM's latency buckets (vllm/v1/metrics/loggers.py), in seconds.
const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];

/// Token-count buckets: 1-2-5 steps up to 128k tokens.
const LENGTH_BUCKETS: &[f64] = &[
    1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0, 10000.0, 20000.0,
    50000.0, 100000.0, 131072.0,
];

/// Finish reasons counted in `pagoda:request_success_total`.
pub const FINISH_REASONS: &[&str] = &["stop", "length", "abort", "error"];
/// Reasons counted in `pagoda:request_rejected_total`.
pub const REJECT_REASONS: &[&str] = &[
    "invalid",
    "queue_full",
    "rate_limited",
    "slo",
    "unauthorized",
    "unavailable",
];

/// Everything the server observes itself (the engine's counters are read at scrape time).
pub struct Metrics {
    pub time_to_first_token: Histogram,
    pub inter_token_latency: Histogram,
    pub time_per_output_token: Histogram,
    pub e2e_latency: Histogram,
    pub queue_time: Histogram,
    pub prompt_tokens: Histogram,
    pub generation_tokens: Histogram,
    finished: [AtomicU64; 4],
    rejected: [AtomicU64; REJECT_REASONS.len()],
    /// Unknown request fields let through, by field (`prepare/field_policy.rs`).
    ignored_fields: Mutex<BTreeMap<String, u64>>,
}

/// Distinct field labels kept before the rest are counted as `other`: the names come from
/// clients, and a scrape must stay small whatever they send.
const MAX_FIELD_LABELS: usize = 64;

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let latency = || Histogram::new(LATENCY_BUCKETS.iter().copied());
        let length = || Histogram::new(LENGTH_BUCKETS.iter().copied());
        Self {
            time_to_first_token: latency(),
            inter_token_latency: latency(),
            time_per_output_token: latency(),
            e2e_latency: latency(),
            queue_time: latency(),
            prompt_tokens: length(),
            generation_tokens: length(),
            finished: Default::default(),
            rejected: Default::default(),
            ignored_fields: Default::default(),
        }
    }

    /// Counts a finished request (one per choice) under its OpenAI finish reason.
    pub fn count_finished(&self, reason: &str) {
        if let Some(i) = FINISH_REASONS.iter().position(|r| *r == reason) {
            self.finished[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts a request answered with an error before it reached the engine.
    pub fn count_rejected(&self, reason: &str) {
        if let Some(i) = REJECT_REASONS.iter().position(|r| *r == reason) {
            self.rejected[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts an unknown request field that was accepted and ignored.
    pub fn count_ignored_field(&self, field: &str) {
        let Ok(mut m) = self.ignored_fields.lock() else {
            return;
        };
        let key = if m.contains_key(field) || m.len() < MAX_FIELD_LABELS {
            field
        } else {
            "other"
        };
        *m.entry(key.to_owned()).or_default() += 1;
    }

    /// The server's own families, with the engine's gauges and counters from `stats`.
    pub fn render(&self, e: &mut Exposition, stats: Option<&EngineStats>, model_name: &str) {
        self.render_model(e, stats, model_name);
        self.render_refusals(e, model_name);
    }

    /// One model's families: the engine's gauges and counters from `stats`, its requests'
    /// finish reasons and latency histograms.
    pub fn render_model(&self, e: &mut Exposition, stats: Option<&EngineStats>, model_name: &str) {
        let label = || model_labels(model_name);
        if let Some(s) = stats {
            for (name, help, v) in [
                (
                    "pagoda:num_requests_running",
                    "Requests in the running batch.",
                    s.num_running as u64,
                ),
                (
                    "pagoda:num_requests_waiting",
                    "Requests waiting to be scheduled.",
                    s.num_waiting as u64,
                ),
            ] {
                e.gauge(name, help, label(), v);
            }
            e.gauge(
                "pagoda:kv_cache_usage_perc",
                "KV-cache usage: 1 means 100 percent.",
                label(),
                s.kv_usage,
            );
            e.gauge(
                "pagoda:kv_cache_num_blocks",
                "Blocks in the KV-cache pool.",
                label(),
                s.num_blocks as u64,
            );
            kv_groups(e, model_name, &s.kv_groups);
            for (name, help, v) in [
                (
                    "pagoda:prompt_tokens_total",
                    "Prompt tokens processed (prefill).",
                    s.prompt_tokens,
                ),
                (
                    "pagoda:generation_tokens_total",
                    "Tokens generated.",
                    s.generation_tokens,
                ),
                (
                    "pagoda:prefix_cache_queries_total",
                    "Prompt tokens looked up in the prefix cache.",
                    s.prefix_queried_tokens,
                ),
                (
                    "pagoda:prefix_cache_hits_total",
                    "Prompt tokens found in the prefix cache.",
                    s.prefix_hit_tokens,
                ),
                (
                    "pagoda:num_preemptions_total",
                    "Sequences preempted for lack of KV blocks.",
                    s.preemptions,
                ),
                (
                    "pagoda:num_context_shifts_total",
                    "Sequences that reached max_model_len and went on after a context shift.",
                    s.context_shifts,
                ),
                ("pagoda:engine_steps_total", "Engine steps run.", s.steps),
            ] {
                e.counter(name, help, label(), v);
            }
            if let Some(spec) = &s.spec {
                crate::observe::metrics::speculative::render(e, model_name, spec);
            }
            if let Some(tier) = &s.kv_tier {
                crate::observe::metrics::kv_disk::render(e, model_name, tier);
            }
        }
        e.scraped(
            "pagoda:request_success_total",
            "Finished requests by finish reason.",
            by_reason(
                model_name,
                "finished_reason",
                FINISH_REASONS,
                &self.finished,
            ),
        );
        for (name, help, h) in [
            (
                "pagoda:time_to_first_token_seconds",
                "Histogram of time to first token in seconds.",
                &self.time_to_first_token,
            ),
            (
                "pagoda:inter_token_latency_seconds",
                "Histogram of inter-token latency in seconds.",
                &self.inter_token_latency,
            ),
            (
                "pagoda:request_time_per_output_token_seconds",
                "Histogram of time per output token in seconds, per request.",
                &self.time_per_output_token,
            ),
            (
                "pagoda:e2e_request_latency_seconds",
                "Histogram of end-to-end request latency in seconds.",
                &self.e2e_latency,
            ),
            (
                "pagoda:request_queue_time_seconds",
                "Histogram of time spent waiting before the first step, in seconds.",
                &self.queue_time,
            ),
            (
                "pagoda:request_prompt_tokens",
                "Number of prompt tokens per request.",
                &self.prompt_tokens,
            ),
            (
                "pagoda:request_generation_tokens",
                "Number of generated tokens per request.",
                &self.generation_tokens,
            ),
        ] {
            e.labelled_histogram(name, help, label(), h);
        }
    }

    /// Requests refused before they reached a model, and unknown fields ignored: counted for
    /// the server (filed under `model_name`, the default model).
    pub fn render_refusals(&self, e: &mut Exposition, model_name: &str) {
        e.scraped(
            "pagoda:request_rejected_total",
            "Requests answered with an error before generation, by reason.",
            by_reason(model_name, "reason", REJECT_REASONS, &self.rejected),
        );
        let ignored: Vec<(String, u64)> = match self.ignored_fields.lock() {
            Ok(m) => m.iter().map(|(k, v)| (k.clone(), *v)).collect(),
            Err(_) => Vec::new(),
        };
        e.scraped(
            "pagoda:request_ignored_fields_total",
            "Unknown request fields accepted and ignored, by field (indices dropped).",
            Scraped::counters(ignored.into_iter().map(|(field, n)| {
                let mut labels = model_labels(model_name);
                labels.push(("field", field));
                (labels, n.into())
            })),
        );
    }
}

/// One series per reason (all of them, zeros included, so rates start at the first scrape).
fn by_reason(
    model_name: &str,
    key: &'static str,
    reasons: &[&str],
    counts: &[AtomicU64],
) -> Scraped {
    Scraped::counters(reasons.iter().zip(counts).map(|(r, c)| {
        let mut labels = model_labels(model_name);
        labels.push((key, (*r).to_owned()));
        (labels, c.load(Ordering::Relaxed).into())
    }))
}

/// Blocks held by each KV group (full attention, or a sliding window that gives back blocks).
fn kv_groups(e: &mut Exposition, model_name: &str, groups: &[pagoda_core::KvGroupUsage]) {
    let series = groups.iter().enumerate().map(|(i, g)| {
        let attention = g
            .sliding_window
            .map_or_else(|| "full".to_string(), |w| format!("sliding_{w}"));
        let mut labels = model_labels(model_name);
        labels.push(("group", i.to_string()));
        labels.push(("attention", attention));
        (labels, (g.blocks as u64).into())
    });
    e.scraped(
        "pagoda:kv_cache_group_blocks",
        "KV blocks held per layer group (a block holds that group's layers).",
        Scraped::gauges(series),
    );
}

/// The KV pool's configuration as an info metric (vLLM's `cache_config_info`: labels carry the
/// values, the sample is 1) and its capacity in tokens.
pub fn render_cache_config(
    e: &mut Exposition,
    kv: &pagoda_model::KvReport,
    prefix_caching: bool,
    model_name: &str,
) {
    // vLLM's label names (`cache_dtype`, `num_gpu_blocks`): the Inference Extension's endpoint
    // picker and llm-d read `block_size` and `num_gpu_blocks` from `vllm:cache_config_info`.
    let labels = vec![
        ("model_name", model_name.to_owned()),
        ("block_size", kv.block_size.to_string()),
        ("cache_dtype", kv.dtype.name().to_owned()),
        ("enable_prefix_caching", prefix_caching.to_string()),
        ("num_gpu_blocks", kv.num_blocks.to_string()),
        ("num_cpu_blocks", "0".to_owned()),
        ("kv_bytes_per_token", kv.bytes_per_token.to_string()),
        ("max_model_len", kv.max_model_len.to_string()),
    ];
    e.gauge(
        "pagoda:cache_config_info",
        "KV cache configuration (in the labels).",
        labels,
        1u64,
    );
    e.gauge(
        "pagoda:kv_cache_capacity_tokens",
        "Tokens the KV pool holds.",
        model_labels(model_name),
        kv.max_tokens_in_pool as u64,
    );
}

/// The embedding batcher's counters: forward passes and the inputs they embedded (their ratio
/// is the batch size concurrent requests reached).
pub fn render_embedder(
    e: &mut Exposition,
    stats: &crate::model::embedder::EmbedderStats,
    model_name: &str,
) {
    e.counter(
        "pagoda:embedding_forward_passes_total",
        "Encoder forward passes run by the embedding batcher.",
        model_labels(model_name),
        stats.passes.load(Ordering::Relaxed),
    );
    e.counter(
        "pagoda:embedding_inputs_total",
        "Inputs embedded.",
        model_labels(model_name),
        stats.inputs.load(Ordering::Relaxed),
    );
}

/// vLLM's `lora_requests_info` gauge (value: the scrape time, labels: the step limit and the
/// comma-joined adapters of running and waiting requests), so LoRA-aware routers built for
/// vLLM read it unchanged; and requests per adapter.
pub fn render_loras(
    e: &mut Exposition,
    stats: &EngineStats,
    loras: &crate::model::loras::LoraRegistry,
) {
    let join = |names: &[std::sync::Arc<str>]| {
        let v: Vec<&str> = names.iter().map(|n| &**n).collect();
        v.join(",")
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let labels = vec![
        ("max_lora", loras.config().max_loras.to_string()),
        ("running_lora_adapters", join(&stats.running_loras)),
        ("waiting_lora_adapters", join(&stats.waiting_loras)),
    ];
    e.gauge(
        "pagoda:lora_requests_info",
        "Running stats on lora requests.",
        labels,
        now,
    );
    let series = loras.list().into_iter().map(|(adapter, _, requests, _)| {
        (vec![("lora_name", adapter.to_string())], requests.into())
    });
    e.scraped(
        "pagoda:lora_requests_total",
        "Requests that named each LoRA adapter.",
        Scraped::counters(series),
    );
    // The digest as the 16 hex digits of `ExtraKeys::lora_id`: a cache-aware router hashes an
    // adapter's prompts with it, as the engine does.
    let series = loras.digests().into_iter().map(|(adapter, digest)| {
        let labels = vec![
            ("lora_name", adapter),
            ("cache_digest", format!("{digest:016x}")),
        ];
        (labels, 1u64.into())
    });
    e.scraped(
        "pagoda:lora_adapter_info",
        "Each LoRA adapter and the digest its prompts' prefix-cache blocks are hashed with.",
        Scraped::gauges(series),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(m: &Metrics, stats: Option<&EngineStats>, model_name: &str) -> String {
        let mut e = Exposition::new();
        m.render(&mut e, stats, model_name);
        e.encode()
    }

    #[test]
    fn histogram_buckets_are_cumulative() {
        let m = Metrics::new();
        for v in [0.0005, 0.003, 0.003, 1000.0, 5000.0] {
            m.e2e_latency.observe(v);
        }
        let text = render(&m, None, "m");
        let bucket = |le: &str, n: u32| {
            format!(
                "pagoda:e2e_request_latency_seconds_bucket{{model_name=\"m\",le=\"{le}\"}} {n}\n"
            )
        };
        assert!(text.contains(&bucket("0.001", 1)), "{text}");
        assert!(text.contains(&bucket("0.005", 3)));
        assert!(text.contains(&bucket("2560", 4)));
        assert!(text.contains(&bucket("+Inf", 5)));
        assert!(text.contains("pagoda:e2e_request_latency_seconds_count{model_name=\"m\"} 5\n"));
    }

    #[test]
    fn counters_carry_their_labels() {
        let m = Metrics::new();
        m.count_finished("length");
        m.count_rejected("queue_full");
        let stats = EngineStats {
            num_running: 2,
            kv_usage: 0.5,
            kv_groups: vec![
                pagoda_core::KvGroupUsage {
                    sliding_window: None,
                    blocks: 3,
                },
                pagoda_core::KvGroupUsage {
                    sliding_window: Some(512),
                    blocks: 7,
                },
            ],
            ..Default::default()
        };
        let text = render(&m, Some(&stats), "a\"b");
        assert!(text.contains(
            "pagoda:request_success_total{model_name=\"a\\\"b\",finished_reason=\"length\"} 1"
        ));
        assert!(text.contains(
            "pagoda:request_rejected_total{model_name=\"a\\\"b\",reason=\"queue_full\"} 1"
        ));
        assert!(text.contains("pagoda:num_requests_running{model_name=\"a\\\"b\"} 2"));
        assert!(text.contains("pagoda:kv_cache_usage_perc{model_name=\"a\\\"b\"} 0.5"));
        assert!(text.contains(
            "pagoda:kv_cache_group_blocks{model_name=\"a\\\"b\",group=\"1\",attention=\"sliding_512\"} 7"
        ));
    }

    #[test]
    fn the_embedding_batcher_counts_passes_and_inputs() {
        // The names-and-types test has no encoder model: these two families are checked here.
        let stats = crate::model::embedder::EmbedderStats::default();
        stats.passes.store(2, Ordering::Relaxed);
        stats.inputs.store(5, Ordering::Relaxed);
        let mut e = Exposition::new();
        render_embedder(&mut e, &stats, "m");
        let text = e.encode();
        for line in [
            "# TYPE pagoda:embedding_forward_passes_total counter",
            "pagoda:embedding_forward_passes_total{model_name=\"m\"} 2",
            "# TYPE pagoda:embedding_inputs_total counter",
            "pagoda:embedding_inputs_total{model_name=\"m\"} 5",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
        }
    }

    #[test]
    fn cache_config_names_the_kv_dtype_and_bytes_per_token() {
        let kv = pagoda_model::KvReport {
            dtype: pagoda_model::KvCacheDtype::Int8,
            bytes_per_token: 8640,
            num_blocks: 100,
            block_size: 16,
            budget_bytes: 1 << 24,
            max_tokens_in_pool: 1600,
            max_model_len: 1600,
            num_groups: 1,
            num_sliding_groups: 0,
            layers_per_block: 30,
        };
        let mut e = Exposition::new();
        render_cache_config(&mut e, &kv, true, "m");
        let text = e.encode();
        assert!(text.contains(
            "pagoda:cache_config_info{model_name=\"m\",block_size=\"16\",cache_dtype=\"int8\",\
             enable_prefix_caching=\"true\",num_gpu_blocks=\"100\",num_cpu_blocks=\"0\",\
             kv_bytes_per_token=\"8640\",max_model_len=\"1600\"} 1"
        ));
        assert!(text.contains("pagoda:kv_cache_capacity_tokens{model_name=\"m\"} 1600"));
    }
}
