//! Service-level objectives and the one rule both `pagoda bench --sweep` (measured) and
//! `pagoda plan` (predicted) use to say whether a load meets them, so the two agree on what
//! "the highest rate that meets the SLO" means.
//!
//! A request meets the SLO when it finished and each target that is set holds (TTFT, TPOT,
//! end-to-end). A load meets the SLO when at least [`ATTAINMENT`] of its requests do:
//! DistServe's "SLO attainment" (90% in its evaluation). Goodput is vLLM's: requests that met
//! every target, per second of the run.

use serde::{Deserialize, Serialize};

/// Share of requests that must meet every target for a load to count as meeting the SLO.
pub const ATTAINMENT: f64 = 0.9;

/// Latency targets; `None` is no target.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Slo {
    /// Maximum time to first token, milliseconds.
    pub ttft_ms: Option<f64>,
    /// Maximum time per output token (after the first), milliseconds.
    pub tpot_ms: Option<f64>,
    /// Maximum time from send to the last token, milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub e2e_ms: Option<f64>,
}

/// A bad `--slo` text.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SloError {
    /// An item is not `name=duration`.
    #[error("--slo item `{0}` is not name=duration (e.g. ttft=1s,tpot=100ms,e2e=20s)")]
    Item(String),
    /// An unknown target name.
    #[error("--slo target `{0}` is unknown (ttft, tpot, itl, e2e)")]
    Name(String),
    /// A duration that does not parse or is not positive.
    #[error("--slo {name}: `{value}` is not a positive duration like 500ms or 2s")]
    Duration {
        /// The target.
        name: String,
        /// The text given.
        value: String,
    },
}

/// Milliseconds of `500ms`, `2s`, `1.5m` or a bare number (milliseconds, as `--slo-ttft`).
fn parse_ms(text: &str) -> Option<f64> {
    let t = text.trim();
    let split = t.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: f64 = num.trim().parse().ok()?;
    let ms = match unit {
        "" | "ms" => v,
        "s" => v * 1e3,
        "m" | "min" => v * 60e3,
        _ => return None,
    };
    (ms.is_finite() && ms > 0.0).then_some(ms)
}

impl Slo {
    /// Parse `ttft=1s,tpot=100ms,e2e=20s` (any subset; `itl` is accepted as TPOT's alias).
    pub fn parse(text: &str) -> Result<Self, SloError> {
        let mut slo = Slo::default();
        for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (name, value) = item
                .split_once('=')
                .ok_or_else(|| SloError::Item(item.to_owned()))?;
            let name = name.trim().to_ascii_lowercase();
            let ms = parse_ms(value).ok_or_else(|| SloError::Duration {
                name: name.clone(),
                value: value.trim().to_owned(),
            })?;
            match name.as_str() {
                "ttft" => slo.ttft_ms = Some(ms),
                "tpot" | "itl" => slo.tpot_ms = Some(ms),
                "e2e" | "e2el" => slo.e2e_ms = Some(ms),
                _ => return Err(SloError::Name(name)),
            }
        }
        Ok(slo)
    }

    /// Whether any target is set.
    pub fn is_set(&self) -> bool {
        self.ttft_ms.is_some() || self.tpot_ms.is_some() || self.e2e_ms.is_some()
    }

    /// Whether a finished request with these latencies (milliseconds) meets every target. No
    /// TTFT (nothing streamed) fails a TTFT target; no TPOT (one output token) passes one.
    pub fn is_met(&self, ttft_ms: Option<f64>, tpot_ms: Option<f64>, e2e_ms: f64) -> bool {
        let ttft_ok = match (self.ttft_ms, ttft_ms) {
            (Some(limit), Some(t)) => t <= limit,
            (Some(_), None) => false,
            (None, _) => true,
        };
        let tpot_ok = match (self.tpot_ms, tpot_ms) {
            (Some(limit), Some(t)) => t <= limit,
            _ => true,
        };
        let e2e_ok = self.e2e_ms.is_none_or(|limit| e2e_ms <= limit);
        ttft_ok && tpot_ok && e2e_ok
    }

    /// `TTFT <= 1000 ms, TPOT <= 100 ms` (the targets set), or `no SLO set`.
    pub fn describe(&self) -> String {
        let parts: Vec<String> = [
            ("TTFT", self.ttft_ms),
            ("TPOT", self.tpot_ms),
            ("E2E", self.e2e_ms),
        ]
        .into_iter()
        .filter_map(|(n, v)| v.map(|v| format!("{n} <= {v} ms")))
        .collect();
        if parts.is_empty() {
            "no SLO set".to_owned()
        } else {
            parts.join(", ")
        }
    }
}

/// Whether `good` of `total` requests is enough attainment for the load to meet the SLO.
pub fn load_meets(good: usize, total: usize) -> bool {
    total > 0 && good as f64 >= ATTAINMENT * total as f64 - 1e-9
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_units_and_rejects_the_rest() {
        let s = Slo::parse("ttft=1s, tpot=100ms,e2e=1.5m").unwrap();
        assert_eq!(
            s,
            Slo {
                ttft_ms: Some(1000.0),
                tpot_ms: Some(100.0),
                e2e_ms: Some(90_000.0)
            }
        );
        assert_eq!(Slo::parse("itl=50").unwrap().tpot_ms, Some(50.0));
        assert!(matches!(Slo::parse("ttft"), Err(SloError::Item(_))));
        assert!(matches!(Slo::parse("foo=1s"), Err(SloError::Name(_))));
        assert!(matches!(
            Slo::parse("ttft=0s"),
            Err(SloError::Duration { .. })
        ));
        assert!(matches!(
            Slo::parse("ttft=3d"),
            Err(SloError::Duration { .. })
        ));
        assert!(!Slo::parse("").unwrap().is_set());
    }

    #[test]
    fn a_request_meets_every_target_that_is_set() {
        let s = Slo::parse("ttft=200ms,tpot=50ms,e2e=1s").unwrap();
        assert!(s.is_met(Some(200.0), Some(50.0), 1000.0));
        assert!(!s.is_met(Some(201.0), Some(10.0), 500.0));
        assert!(!s.is_met(Some(100.0), Some(51.0), 500.0));
        assert!(!s.is_met(Some(100.0), Some(10.0), 1001.0));
        assert!(!s.is_met(None, None, 10.0));
        assert!(s.is_met(Some(100.0), None, 100.0));
        assert!(load_meets(9, 10) && !load_meets(8, 10) && !load_meets(0, 0));
    }
}
