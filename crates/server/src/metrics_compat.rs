//! `--metrics-compat vllm`: the `pagoda:` series that have a vLLM counterpart are exported a
//! second time under their `vllm:` names, so tools that read vLLM's metrics (the Gateway API
//! Inference Extension's endpoint picker, llm-d's scorers, vLLM dashboards) work unchanged.
//!
//! The copy is made from the rendered exposition, so both names always carry the same value.

use std::fmt::Write;
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

/// The `vllm:` copies of the families in `text` that vLLM has, to append to it.
pub fn mirror_vllm(text: &str) -> String {
    let mut out = String::with_capacity(text.len() / 2);
    for line in text.lines() {
        let (meta, rest) = match line.strip_prefix("# ") {
            Some(r) => match r.split_once(' ') {
                Some((kind @ ("HELP" | "TYPE"), rest)) => (Some(kind), rest),
                _ => continue,
            },
            None => (None, line),
        };
        let Some(after) = rest.strip_prefix("pagoda:") else {
            continue;
        };
        let name_len = after.find(['{', ' ']).unwrap_or(after.len());
        let family = family_of(&after[..name_len]);
        if !VLLM_FAMILIES.contains(&family) {
            continue;
        }
        let mut emit = |name_and_rest: &str| match meta {
            Some(kind) => {
                let _ = writeln!(out, "# {kind} vllm:{name_and_rest}");
            }
            None => {
                let _ = writeln!(out, "vllm:{name_and_rest}");
            }
        };
        emit(after);
        if family == "kv_cache_usage_perc" {
            emit(&after.replacen(family, OLD_KV_USAGE, 1));
        }
    }
    // The alias's lines were interleaved with the original's; Prometheus wants a family's
    // lines together, so they are regrouped (stable: order within each family is kept).
    regroup(&out)
}

/// A histogram's `_bucket`/`_sum`/`_count` series belong to the family without the suffix.
fn family_of(name: &str) -> &str {
    for suffix in ["_bucket", "_sum", "_count"] {
        if let Some(base) = name.strip_suffix(suffix)
            && VLLM_FAMILIES.contains(&base)
        {
            return base;
        }
    }
    name
}

fn regroup(text: &str) -> String {
    let mut groups: Vec<(String, String)> = Vec::new();
    for line in text.lines() {
        let body = line
            .strip_prefix("# HELP ")
            .or_else(|| line.strip_prefix("# TYPE "))
            .unwrap_or(line);
        let name_len = body.find(['{', ' ']).unwrap_or(body.len());
        let family = family_of(body[..name_len].trim_start_matches("vllm:")).to_owned();
        let slot = match groups.iter().position(|(f, _)| *f == family) {
            Some(i) => i,
            None => {
                groups.push((family, String::new()));
                groups.len() - 1
            }
        };
        groups[slot].1.push_str(line);
        groups[slot].1.push('\n');
    }
    groups.into_iter().map(|(_, lines)| lines).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_the_families_vllm_has_and_only_those() {
        let text = "# HELP pagoda:num_requests_waiting Waiting.\n\
                    # TYPE pagoda:num_requests_waiting gauge\n\
                    pagoda:num_requests_waiting{model_name=\"m\"} 3\n\
                    # HELP pagoda:engine_steps_total Steps.\n\
                    # TYPE pagoda:engine_steps_total counter\n\
                    pagoda:engine_steps_total{model_name=\"m\"} 9\n\
                    # HELP pagoda:e2e_request_latency_seconds Latency.\n\
                    # TYPE pagoda:e2e_request_latency_seconds histogram\n\
                    pagoda:e2e_request_latency_seconds_bucket{le=\"0.1\"} 1\n\
                    pagoda:e2e_request_latency_seconds_sum 0.05\n\
                    pagoda:e2e_request_latency_seconds_count 1\n";
        let m = mirror_vllm(text);
        assert!(m.contains("vllm:num_requests_waiting{model_name=\"m\"} 3\n"));
        assert!(m.contains("# TYPE vllm:num_requests_waiting gauge\n"));
        assert!(m.contains("vllm:e2e_request_latency_seconds_bucket{le=\"0.1\"} 1\n"));
        assert!(m.contains("vllm:e2e_request_latency_seconds_count 1\n"));
        assert!(!m.contains("engine_steps"));
        assert!(!m.contains("pagoda:"));
    }

    #[test]
    fn the_old_kv_usage_name_is_its_own_family() {
        let text = "# HELP pagoda:kv_cache_usage_perc KV.\n\
                    # TYPE pagoda:kv_cache_usage_perc gauge\n\
                    pagoda:kv_cache_usage_perc{model_name=\"m\"} 0.25\n";
        let m = mirror_vllm(text);
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
