//! `--metrics-compat vllm`: the `pagoda:` series that have a vLLM counterpart are exported a
//! second time under their `vllm:` names, so tools that read vLLM's metrics (the Gateway API
//! Inference Extension's endpoint picker, llm-d's scorers, vLLM dashboards) work unchanged.
//!
//! Each copy is the same metric registered under a second name, so both carry the same value.

use std::str::FromStr;

/// Which extra metric names `/metrics` exports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MetricsCompat {
    /// `pagoda:` names only.
    #[default]
    Pagoda,
    /// `pagoda:` names, and vLLM's names for the series vLLM has.
    Vllm,
}

impl FromStr for MetricsCompat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" | "pagoda" => Ok(Self::Pagoda),
            "vllm" => Ok(Self::Vllm),
            other => Err(format!(
                "unknown metrics compatibility `{other}`: expected `none` or `vllm`"
            )),
        }
    }
}

/// Families vLLM exports under the same name after its `vllm:` prefix (vllm/v1/metrics/
/// loggers.py). Series pagoda has and vLLM has not (rejections, engine steps) stay `pagoda:`.
const VLLM_FAMILIES: &[&str] = &[
    "num_requests_running",
    "num_requests_waiting",
    "kv_cache_usage_perc",
    "cache_config_info",
    "lora_requests_info",
    "prompt_tokens_total",
    "generation_tokens_total",
    "prefix_cache_queries_total",
    "prefix_cache_hits_total",
    "num_preemptions_total",
    "request_success_total",
    "time_to_first_token_seconds",
    "inter_token_latency_seconds",
    "request_time_per_output_token_seconds",
    "e2e_request_latency_seconds",
    "request_queue_time_seconds",
    "request_prompt_tokens",
    "request_generation_tokens",
    "spec_decode_num_drafts_total",
    "spec_decode_num_draft_tokens_total",
    "spec_decode_num_accepted_tokens_total",
    "spec_decode_num_accepted_tokens_per_pos_total",
];

/// vLLM before 0.10 (and endpoint pickers configured for it) read KV usage under this name.
const OLD_KV_USAGE: &str = "gpu_cache_usage_perc";

/// The `vllm:` names the family `name` is also exported under with `--metrics-compat vllm`.
pub fn vllm_aliases(name: &str) -> Vec<String> {
    let Some(family) = name.strip_prefix("pagoda:") else {
        return Vec::new();
    };
    if !VLLM_FAMILIES.contains(&family) {
        return Vec::new();
    }
    let mut names = vec![format!("vllm:{family}")];
    if family == "kv_cache_usage_perc" {
        names.push(format!("vllm:{OLD_KV_USAGE}"));
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;
    use pagoda_exposition::{Exposition, Histogram};

    /// The `vllm:` copies alone: they are written after every `pagoda:` family.
    fn mirror_vllm(e: &Exposition) -> String {
        let text = e.encode();
        let first = text.find("# HELP vllm:").unwrap_or(text.len());
        text[first..].to_owned()
    }

    fn model() -> pagoda_exposition::Labels {
        vec![("model_name", "m".to_owned())]
    }

    #[test]
    fn copies_the_families_vllm_has_and_only_those() {
        let mut e = Exposition::with_aliases(vllm_aliases);
        e.gauge("pagoda:num_requests_waiting", "Waiting.", model(), 3u64);
        e.counter("pagoda:engine_steps_total", "Steps.", model(), 9u64);
        let h = Histogram::new([0.1]);
        h.observe(0.05);
        e.histogram("pagoda:e2e_request_latency_seconds", "Latency.", &h);
        let m = mirror_vllm(&e);
        assert!(m.contains("vllm:num_requests_waiting{model_name=\"m\"} 3\n"));
        assert!(m.contains("# TYPE vllm:num_requests_waiting gauge\n"));
        assert!(m.contains("vllm:e2e_request_latency_seconds_bucket{le=\"0.1\"} 1\n"));
        assert!(m.contains("vllm:e2e_request_latency_seconds_count 1\n"));
        assert!(!m.contains("engine_steps"));
        assert!(!m.contains("pagoda:"));
    }

    #[test]
    fn the_old_kv_usage_name_is_its_own_family() {
        let mut e = Exposition::with_aliases(vllm_aliases);
        e.gauge("pagoda:kv_cache_usage_perc", "KV.", model(), 0.25);
        let m = mirror_vllm(&e);
        let lines: Vec<&str> = m.lines().collect();
        assert_eq!(
            lines,
            [
                "# HELP vllm:kv_cache_usage_perc KV.",
                "# TYPE vllm:kv_cache_usage_perc gauge",
                "vllm:kv_cache_usage_perc{model_name=\"m\"} 0.25",
                "# HELP vllm:gpu_cache_usage_perc KV.",
                "# TYPE vllm:gpu_cache_usage_perc gauge",
                "vllm:gpu_cache_usage_perc{model_name=\"m\"} 0.25",
            ]
        );
    }
}
