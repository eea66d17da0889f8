//! Speculative decoding as the server counts it: the bench reads the server's `/metrics`
//! before and after each point and reports the acceptance rate (accepted / proposed tokens)
//! and the mean acceptance length (tokens per verification: 1 + accepted / drafts), from
//! vLLM's counter names under either the `pagoda:` or the `vllm:` prefix.

use serde::{Deserialize, Serialize};

use crate::client::Target;

/// The speculation counters at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SpecCounters {
    /// Sequence-steps with at least one proposed token.
    pub drafts: f64,
    /// Proposed tokens.
    pub draft_tokens: f64,
    /// Accepted proposed tokens.
    pub accepted: f64,
}

/// Speculation over one load point.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SpecSummary {
    /// Proposed tokens over the point.
    pub draft_tokens: u64,
    /// Accepted proposed tokens over the point.
    pub accepted_tokens: u64,
    /// Accepted over proposed tokens.
    pub acceptance_rate: f64,
    /// Tokens per verification: the accepted run plus the target's own token.
    pub mean_acceptance_length: f64,
}

/// Reads the counters from Prometheus text; `None` when the server exports none.
pub fn parse(text: &str) -> Option<SpecCounters> {
    let mut c = SpecCounters::default();
    let mut seen = false;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let name = line.split(['{', ' ']).next().unwrap_or("");
        let Some(metric) = name
            .strip_prefix("pagoda:")
            .or_else(|| name.strip_prefix("vllm:"))
        else {
            continue;
        };
        let value = line
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0);
        let slot = match metric.trim_end_matches("_total") {
            "spec_decode_num_drafts" => &mut c.drafts,
            "spec_decode_num_draft_tokens" => &mut c.draft_tokens,
            "spec_decode_num_accepted_tokens" => &mut c.accepted,
            _ => continue,
        };
        *slot += value;
        seen = true;
    }
    seen.then_some(c)
}

/// The counters of `target` now, if it exports them.
pub async fn scrape(http: &reqwest::Client, target: &Target) -> Option<SpecCounters> {
    let mut req = http.get(target.url("/metrics"));
    if let Some(k) = &target.api_key {
        req = req.bearer_auth(k);
    }
    let text = req.send().await.ok()?.text().await.ok()?;
    parse(&text)
}

/// What happened between two scrapes; `None` when nothing was proposed.
pub fn between(before: SpecCounters, after: SpecCounters) -> Option<SpecSummary> {
    let drafts = after.drafts - before.drafts;
    let proposed = after.draft_tokens - before.draft_tokens;
    let accepted = after.accepted - before.accepted;
    (proposed > 0.0).then(|| SpecSummary {
        draft_tokens: proposed as u64,
        accepted_tokens: accepted as u64,
        acceptance_rate: accepted / proposed,
        mean_acceptance_length: 1.0 + accepted / drafts.max(1.0),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn reads_both_prefixes_and_takes_the_difference() {
        let text = "# HELP x\npagoda:spec_decode_num_drafts{model_name=\"m\"} 10\n\
                    pagoda:spec_decode_num_draft_tokens{model_name=\"m\"} 40\n\
                    pagoda:spec_decode_num_accepted_tokens{model_name=\"m\"} 30\n\
                    pagoda:spec_decode_num_accepted_tokens_per_pos{model_name=\"m\",position=\"0\"} 9\n";
        let a = parse(text).unwrap();
        assert_eq!((a.drafts, a.draft_tokens, a.accepted), (10.0, 40.0, 30.0));
        let b = parse("vllm:spec_decode_num_drafts_total 20\nvllm:spec_decode_num_draft_tokens_total 80\nvllm:spec_decode_num_accepted_tokens_total 50\n").unwrap();
        let s = between(a, b).unwrap();
        assert_eq!((s.draft_tokens, s.accepted_tokens), (40, 20));
        assert!((s.acceptance_rate - 0.5).abs() < 1e-9);
        assert!((s.mean_acceptance_length - 3.0).abs() < 1e-9);
        assert!(parse("pagoda:num_requests_running 1\n").is_none());
        assert!(between(a, a).is_none());
    }
}
