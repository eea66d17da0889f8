//! Prometheus text exposition of the server's metrics, named like vLLM's (`vllm:` becomes
//! `pagoda:`): latency and length histograms observed per request here, gauges and token
//! counters read from the engine's stats at scrape time.
//!
//! Histograms are written by hand (fixed buckets behind a mutex): a dozen series do not justify
//! a metrics crate and its registry machinery.

use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use pagoda_core::EngineStats;

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
    "unauthorized",
    "unavailable",
];

struct HistogramData {
    /// Per bucket (not cumulative); the last slot is +Inf.
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

/// A fixed-bucket histogram.
pub struct Histogram {
    name: &'static str,
    help: &'static str,
    bounds: &'static [f64],
    data: Mutex<HistogramData>,
}

impl Histogram {
    fn new(name: &'static str, help: &'static str, bounds: &'static [f64]) -> Self {
        Self {
            name,
            help,
            bounds,
            data: Mutex::new(HistogramData {
                counts: vec![0; bounds.len() + 1],
                sum: 0.0,
                count: 0,
            }),
        }
    }

    pub fn observe(&self, value: f64) {
        let slot = self
            .bounds
            .iter()
            .position(|&b| value <= b)
            .unwrap_or(self.bounds.len());
        if let Ok(mut d) = self.data.lock() {
            d.counts[slot] += 1;
            d.sum += value;
            d.count += 1;
        }
    }

    fn render(&self, out: &mut String) {
        let Ok(d) = self.data.lock() else { return };
        let _ = writeln!(out, "# HELP {} {}", self.name, self.help);
        let _ = writeln!(out, "# TYPE {} histogram", self.name);
        let mut cumulative = 0;
        for (bound, count) in self.bounds.iter().zip(&d.counts) {
            cumulative += count;
            let _ = writeln!(out, "{}_bucket{{le=\"{bound}\"}} {cumulative}", self.name);
        }
        let _ = writeln!(out, "{}_bucket{{le=\"+Inf\"}} {}", self.name, d.count);
        let _ = writeln!(out, "{}_sum {}", self.name, d.sum);
        let _ = writeln!(out, "{}_count {}", self.name, d.count);
    }
}

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
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        Self {
            time_to_first_token: Histogram::new(
                "pagoda:time_to_first_token_seconds",
                "Histogram of time to first token in seconds.",
                LATENCY_BUCKETS,
            ),
            inter_token_latency: Histogram::new(
                "pagoda:inter_token_latency_seconds",
                "Histogram of inter-token latency in seconds.",
                LATENCY_BUCKETS,
            ),
            time_per_output_token: Histogram::new(
                "pagoda:request_time_per_output_token_seconds",
                "Histogram of time per output token in seconds, per request.",
                LATENCY_BUCKETS,
            ),
            e2e_latency: Histogram::new(
                "pagoda:e2e_request_latency_seconds",
                "Histogram of end-to-end request latency in seconds.",
                LATENCY_BUCKETS,
            ),
            queue_time: Histogram::new(
                "pagoda:request_queue_time_seconds",
                "Histogram of time spent waiting before the first step, in seconds.",
                LATENCY_BUCKETS,
            ),
            prompt_tokens: Histogram::new(
                "pagoda:request_prompt_tokens",
                "Number of prompt tokens per request.",
                LENGTH_BUCKETS,
            ),
            generation_tokens: Histogram::new(
                "pagoda:request_generation_tokens",
                "Number of generated tokens per request.",
                LENGTH_BUCKETS,
            ),
            finished: Default::default(),
            rejected: Default::default(),
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

    /// The whole exposition, with the engine's gauges and counters from `stats`.
    pub fn render(&self, stats: Option<&EngineStats>, model_name: &str) -> String {
        let mut out = String::with_capacity(8192);
        let label = model_label(model_name);
        if let Some(s) = stats {
            gauge(
                &mut out,
                "pagoda:num_requests_running",
                "Requests in the running batch.",
                &label,
                s.num_running as f64,
            );
            gauge(
                &mut out,
                "pagoda:num_requests_waiting",
                "Requests waiting to be scheduled.",
                &label,
                s.num_waiting as f64,
            );
            gauge(
                &mut out,
                "pagoda:kv_cache_usage_perc",
                "KV-cache usage: 1 means 100 percent.",
                &label,
                s.kv_usage,
            );
            gauge(
                &mut out,
                "pagoda:kv_cache_num_blocks",
                "Blocks in the KV-cache pool.",
                &label,
                s.num_blocks as f64,
            );
            kv_groups(&mut out, &label, &s.kv_groups);
            counter(
                &mut out,
                "pagoda:prompt_tokens_total",
                "Prompt tokens processed (prefill).",
                &label,
                s.prompt_tokens,
            );
            counter(
                &mut out,
                "pagoda:generation_tokens_total",
                "Tokens generated.",
                &label,
                s.generation_tokens,
            );
            counter(
                &mut out,
                "pagoda:prefix_cache_queries_total",
                "Prompt tokens looked up in the prefix cache.",
                &label,
                s.prefix_queried_tokens,
            );
            counter(
                &mut out,
                "pagoda:prefix_cache_hits_total",
                "Prompt tokens found in the prefix cache.",
                &label,
                s.prefix_hit_tokens,
            );
            counter(
                &mut out,
                "pagoda:num_preemptions_total",
                "Sequences preempted for lack of KV blocks.",
                &label,
                s.preemptions,
            );
            counter(
                &mut out,
                "pagoda:num_context_shifts_total",
                "Sequences that reached max_model_len and went on after a context shift.",
                &label,
                s.context_shifts,
            );
            counter(
                &mut out,
                "pagoda:engine_steps_total",
                "Engine steps run.",
                &label,
                s.steps,
            );
            if let Some(spec) = &s.spec {
                crate::spec_metrics::render(&mut out, &label, spec);
            }
            if let Some(tier) = &s.kv_tier {
                crate::kv_disk_metrics::render(&mut out, &label, tier);
            }
        }
        labelled_counter(
            &mut out,
            "pagoda:request_success_total",
            "Finished requests by finish reason.",
            &label,
            "finished_reason",
            FINISH_REASONS,
            &self.finished,
        );
        labelled_counter(
            &mut out,
            "pagoda:request_rejected_total",
            "Requests answered with an error before generation, by reason.",
            &label,
            "reason",
            REJECT_REASONS,
            &self.rejected,
        );
        for h in [
            &self.time_to_first_token,
            &self.inter_token_latency,
            &self.time_per_output_token,
            &self.e2e_latency,
            &self.queue_time,
            &self.prompt_tokens,
            &self.generation_tokens,
        ] {
            h.render(&mut out);
        }
        out
    }
}

/// The `model_name` label every series carries.
pub fn model_label(model_name: &str) -> String {
    format!("model_name=\"{}\"", escape_label(model_name))
}

fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Blocks held by each KV group (full attention, or a sliding window that gives back blocks).
fn kv_groups(out: &mut String, label: &str, groups: &[pagoda_core::KvGroupUsage]) {
    let name = "pagoda:kv_cache_group_blocks";
    let _ = writeln!(
        out,
        "# HELP {name} KV blocks held per layer group (a block holds that group's layers).\n# TYPE {name} gauge"
    );
    for (i, g) in groups.iter().enumerate() {
        let attention = g
            .sliding_window
            .map_or_else(|| "full".to_string(), |w| format!("sliding_{w}"));
        let _ = writeln!(
            out,
            "{name}{{{label},group=\"{i}\",attention=\"{attention}\"}} {}",
            g.blocks
        );
    }
}

fn gauge(out: &mut String, name: &str, help: &str, label: &str, v: f64) {
    let _ = writeln!(
        out,
        "# HELP {name} {help}\n# TYPE {name} gauge\n{name}{{{label}}} {v}"
    );
}

/// The KV pool's configuration as an info metric (vLLM's `cache_config_info`: labels carry the
/// values, the sample is 1) and its capacity in tokens.
pub fn render_cache_config(
    out: &mut String,
    kv: &pagoda_model::KvReport,
    prefix_caching: bool,
    model_name: &str,
) {
    // vLLM's label names (`cache_dtype`, `num_gpu_blocks`): the Inference Extension's endpoint
    // picker and llm-d read `block_size` and `num_gpu_blocks` from `vllm:cache_config_info`.
    let label = format!(
        "model_name=\"{}\",block_size=\"{}\",cache_dtype=\"{}\",enable_prefix_caching=\"{}\",\
         num_gpu_blocks=\"{}\",num_cpu_blocks=\"0\",kv_bytes_per_token=\"{}\",max_model_len=\"{}\"",
        escape_label(model_name),
        kv.block_size,
        kv.dtype.name(),
        prefix_caching,
        kv.num_blocks,
        kv.bytes_per_token,
        kv.max_model_len,
    );
    gauge(
        out,
        "pagoda:cache_config_info",
        "KV cache configuration (in the labels).",
        &label,
        1.0,
    );
    let label = format!("model_name=\"{}\"", escape_label(model_name));
    gauge(
        out,
        "pagoda:kv_cache_capacity_tokens",
        "Tokens the KV pool holds.",
        &label,
        kv.max_tokens_in_pool as f64,
    );
}

/// The embedding batcher's counters: forward passes and the inputs they embedded (their ratio
/// is the batch size concurrent requests reached).
pub fn render_embedder(stats: &crate::model::embedder::EmbedderStats, model_name: &str) -> String {
    use std::sync::atomic::Ordering;
    let mut out = String::new();
    let label = model_label(model_name);
    counter(
        &mut out,
        "pagoda:embedding_forward_passes_total",
        "Encoder forward passes run by the embedding batcher.",
        &label,
        stats.passes.load(Ordering::Relaxed),
    );
    counter(
        &mut out,
        "pagoda:embedding_inputs_total",
        "Inputs embedded.",
        &label,
        stats.inputs.load(Ordering::Relaxed),
    );
    out
}

/// vLLM's `lora_requests_info` gauge (value: the scrape time, labels: the step limit and the
/// comma-joined adapters of running and waiting requests), so LoRA-aware routers built for
/// vLLM read it unchanged; and requests per adapter.
pub fn render_loras(
    out: &mut String,
    stats: &EngineStats,
    loras: &crate::model::loras::LoraRegistry,
) {
    let join = |names: &[std::sync::Arc<str>]| {
        let v: Vec<&str> = names.iter().map(|n| &**n).collect();
        escape_label(&v.join(","))
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let label = format!(
        "max_lora=\"{}\",running_lora_adapters=\"{}\",waiting_lora_adapters=\"{}\"",
        loras.config().max_loras,
        join(&stats.running_loras),
        join(&stats.waiting_loras)
    );
    gauge(
        out,
        "pagoda:lora_requests_info",
        "Running stats on lora requests.",
        &label,
        now,
    );
    let name = "pagoda:lora_requests_total";
    let _ = writeln!(
        out,
        "# HELP {name} Requests that named each LoRA adapter.\n# TYPE {name} counter"
    );
    for (adapter, _, requests, _) in loras.list() {
        let _ = writeln!(
            out,
            "{name}{{lora_name=\"{}\"}} {requests}",
            escape_label(&adapter)
        );
    }
}

pub(crate) fn counter(out: &mut String, name: &str, help: &str, label: &str, v: u64) {
    let _ = writeln!(
        out,
        "# HELP {name} {help}\n# TYPE {name} counter\n{name}{{{label}}} {v}"
    );
}

fn labelled_counter(
    out: &mut String,
    name: &str,
    help: &str,
    label: &str,
    key: &str,
    values: &[&str],
    counts: &[AtomicU64],
) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
    for (v, c) in values.iter().zip(counts) {
        let _ = writeln!(
            out,
            "{name}{{{label},{key}=\"{v}\"}} {}",
            c.load(Ordering::Relaxed)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative() {
        let m = Metrics::new();
        for v in [0.0005, 0.003, 0.003, 1000.0, 5000.0] {
            m.e2e_latency.observe(v);
        }
        let text = m.render(None, "m");
        assert!(text.contains("pagoda:e2e_request_latency_seconds_bucket{le=\"0.001\"} 1\n"));
        assert!(text.contains("pagoda:e2e_request_latency_seconds_bucket{le=\"0.005\"} 3\n"));
        assert!(text.contains("pagoda:e2e_request_latency_seconds_bucket{le=\"2560\"} 4\n"));
        assert!(text.contains("pagoda:e2e_request_latency_seconds_bucket{le=\"+Inf\"} 5\n"));
        assert!(text.contains("pagoda:e2e_request_latency_seconds_count 5\n"));
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
        let text = m.render(Some(&stats), "a\"b");
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
        let mut text = String::new();
        render_cache_config(&mut text, &kv, true, "m");
        assert!(text.contains(
            "pagoda:cache_config_info{model_name=\"m\",block_size=\"16\",cache_dtype=\"int8\",\
             enable_prefix_caching=\"true\",num_gpu_blocks=\"100\",num_cpu_blocks=\"0\",\
             kv_bytes_per_token=\"8640\",max_model_len=\"1600\"} 1"
        ));
        assert!(text.contains("pagoda:kv_cache_capacity_tokens{model_name=\"m\"} 1600"));
    }
}
