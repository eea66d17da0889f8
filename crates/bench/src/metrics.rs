//! From per-request records to a summary: throughput, TTFT / TPOT / ITL / end-to-end
//! percentiles and goodput under optional SLOs.
//!
//! Percentiles interpolate linearly between order statistics (NumPy's default, which vLLM's
//! `bench serve` reports), so figures compare directly with vLLM's.

use serde::{Deserialize, Serialize};

use crate::client::RequestRecord;

pub use pagoda_capacity::Slo;

/// Did this request finish and meet every target of `slo` that is set? A request with one
/// output token has no TPOT and passes that target.
pub fn meets_slo(slo: &Slo, record: &RequestRecord) -> bool {
    record.success && slo.is_met(record.ttft_ms, record.tpot_ms, record.e2e_ms)
}

/// Mean and percentiles of one latency, milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencyStats {
    /// Number of samples.
    pub count: usize,
    /// Arithmetic mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest sample.
    pub max: f64,
}

impl LatencyStats {
    /// Statistics of `samples` (all zero when empty).
    pub fn from_samples(samples: &[f64]) -> Self {
        if samples.is_empty() {
            return Self::default();
        }
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        Self {
            count: sorted.len(),
            mean: sorted.iter().sum::<f64>() / sorted.len() as f64,
            p50: percentile_sorted(&sorted, 50.0),
            p90: percentile_sorted(&sorted, 90.0),
            p99: percentile_sorted(&sorted, 99.0),
            max: sorted[sorted.len() - 1],
        }
    }
}

/// The `q`-th percentile (0..=100) of ascending `sorted`, interpolating linearly between the
/// two nearest ranks. `sorted` must not be empty.
pub fn percentile_sorted(sorted: &[f64], q: f64) -> f64 {
    debug_assert!(!sorted.is_empty());
    debug_assert!(sorted.windows(2).all(|w| w[0] <= w[1]));
    let rank = (q / 100.0).clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let lo = rank.floor() as usize;
    let hi = rank.ceil() as usize;
    sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo as f64)
}

/// Goodput: the requests that met the SLO.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Goodput {
    /// The targets applied.
    pub slo: Slo,
    /// Successful requests within every target.
    pub good_requests: usize,
    /// `good_requests` per second of the run.
    pub requests_per_s: f64,
    /// Share of all requests (failed ones included) that met every target.
    #[serde(default)]
    pub attainment: f64,
    /// Whether the point meets the SLO: attainment of at least `pagoda_capacity::ATTAINMENT`.
    #[serde(default)]
    pub meets_slo: bool,
}

/// Summary of one run against one target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Requests that finished without error.
    pub completed: usize,
    /// Requests that failed (HTTP status, error event, transport error or timeout).
    pub failed: usize,
    /// From the first send to the last response, seconds.
    pub duration_s: f64,
    /// Completed requests per second.
    pub request_throughput: f64,
    /// Prompt tokens of completed requests per second.
    pub input_tokens_per_s: f64,
    /// Output tokens of completed requests per second.
    pub output_tokens_per_s: f64,
    /// Total prompt tokens of completed requests (from `usage` when the server sent it).
    pub total_input_tokens: u64,
    /// Total output tokens of completed requests (from `usage` when the server sent it).
    pub total_output_tokens: u64,
    /// Prompt tokens the server reported as prefix-cache hits.
    pub total_cached_tokens: u64,
    /// Time to first token.
    pub ttft_ms: LatencyStats,
    /// Time per output token after the first, per request.
    pub tpot_ms: LatencyStats,
    /// Gaps between consecutive streamed chunks, over all requests.
    pub itl_ms: LatencyStats,
    /// Send to last byte.
    pub e2e_ms: LatencyStats,
    /// Requests meeting the SLO; `slo` fields are null when no target was set.
    pub goodput: Goodput,
    /// Most requests in flight at once.
    pub max_in_flight: usize,
}

impl Summary {
    /// Summarize `records` of a run that lasted `duration_s` seconds.
    pub fn from_records(
        records: &[RequestRecord],
        duration_s: f64,
        slo: Slo,
        max_in_flight: usize,
    ) -> Self {
        let ok: Vec<&RequestRecord> = records.iter().filter(|r| r.success).collect();
        let per_s = |x: f64| {
            if duration_s > 0.0 {
                x / duration_s
            } else {
                0.0
            }
        };
        let total_input: u64 = ok.iter().map(|r| u64::from(r.input_tokens())).sum();
        let total_output: u64 = ok.iter().map(|r| u64::from(r.output_tokens())).sum();
        let ttft: Vec<f64> = ok.iter().filter_map(|r| r.ttft_ms).collect();
        let tpot: Vec<f64> = ok.iter().filter_map(|r| r.tpot_ms).collect();
        let itl: Vec<f64> = ok.iter().flat_map(|r| r.itl_ms.iter().copied()).collect();
        let e2e: Vec<f64> = ok.iter().map(|r| r.e2e_ms).collect();
        let good = ok.iter().filter(|r| meets_slo(&slo, r)).count();
        Self {
            completed: ok.len(),
            failed: records.len() - ok.len(),
            duration_s,
            request_throughput: per_s(ok.len() as f64),
            input_tokens_per_s: per_s(total_input as f64),
            output_tokens_per_s: per_s(total_output as f64),
            total_input_tokens: total_input,
            total_output_tokens: total_output,
            total_cached_tokens: ok
                .iter()
                .filter_map(|r| r.cached_tokens)
                .map(u64::from)
                .sum(),
            ttft_ms: LatencyStats::from_samples(&ttft),
            tpot_ms: LatencyStats::from_samples(&tpot),
            itl_ms: LatencyStats::from_samples(&itl),
            e2e_ms: LatencyStats::from_samples(&e2e),
            goodput: Goodput {
                slo,
                good_requests: good,
                requests_per_s: per_s(good as f64),
                attainment: if records.is_empty() {
                    0.0
                } else {
                    good as f64 / records.len() as f64
                },
                meets_slo: pagoda_capacity::slo::load_meets(good, records.len()),
            },
            max_in_flight,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_match_numpy_linear_interpolation() {
        // numpy.percentile([1..=10], [50, 90, 99]) == [5.5, 9.1, 9.91]
        let xs: Vec<f64> = (1..=10).map(f64::from).collect();
        let s = LatencyStats::from_samples(&xs);
        assert!((s.p50 - 5.5).abs() < 1e-12);
        assert!((s.p90 - 9.1).abs() < 1e-12);
        assert!((s.p99 - 9.91).abs() < 1e-12);
        assert_eq!(s.max, 10.0);
        assert_eq!(s.mean, 5.5);
        assert_eq!(s.count, 10);
        // Order of input does not matter; a single sample is every percentile.
        let s2 = LatencyStats::from_samples(&[3.0, 1.0, 2.0]);
        assert_eq!((s2.p50, s2.max), (2.0, 3.0));
        let one = LatencyStats::from_samples(&[4.0]);
        assert_eq!((one.p50, one.p99, one.max), (4.0, 4.0, 4.0));
        assert_eq!(LatencyStats::from_samples(&[]), LatencyStats::default());
        // 0..=100: the q-th percentile is q.
        let hundred: Vec<f64> = (0..=100).map(f64::from).collect();
        for q in [0.0, 12.5, 50.0, 99.0, 100.0] {
            assert!((percentile_sorted(&hundred, q) - q).abs() < 1e-9);
        }
    }

    fn record(success: bool, ttft: Option<f64>, tpot: Option<f64>, out: u32) -> RequestRecord {
        RequestRecord {
            success,
            ttft_ms: ttft,
            tpot_ms: tpot,
            e2e_ms: ttft.unwrap_or(0.0) + tpot.unwrap_or(0.0) * f64::from(out.saturating_sub(1)),
            completion_tokens: Some(out),
            prompt_tokens: Some(10),
            itl_ms: tpot
                .map(|t| vec![t; out.saturating_sub(1) as usize])
                .unwrap_or_default(),
            ..RequestRecord::default()
        }
    }

    #[test]
    fn goodput_counts_only_successful_requests_within_both_targets() {
        let records = vec![
            record(true, Some(100.0), Some(20.0), 10), // good
            record(true, Some(300.0), Some(20.0), 10), // TTFT too slow
            record(true, Some(100.0), Some(60.0), 10), // TPOT too slow
            record(true, Some(200.0), None, 1),        // one token: no TPOT, TTFT at the limit
            record(false, Some(10.0), Some(1.0), 0),   // failed
        ];
        let slo = Slo {
            ttft_ms: Some(200.0),
            tpot_ms: Some(50.0),
            e2e_ms: None,
        };
        let s = Summary::from_records(&records, 2.0, slo, 3);
        assert_eq!(s.goodput.good_requests, 2);
        assert_eq!(s.goodput.requests_per_s, 1.0);
        assert_eq!((s.completed, s.failed), (4, 1));
        assert_eq!(s.request_throughput, 2.0);
        assert_eq!(s.total_output_tokens, 31);
        assert_eq!(s.total_input_tokens, 40);
        assert_eq!(s.output_tokens_per_s, 15.5);
        assert_eq!(s.tpot_ms.count, 3);
        assert_eq!(s.itl_ms.count, 27);

        let ttft_only = Slo {
            ttft_ms: Some(150.0),
            ..Slo::default()
        };
        assert_eq!(
            Summary::from_records(&records, 2.0, ttft_only, 3)
                .goodput
                .good_requests,
            2
        );
        let none = Summary::from_records(&records, 2.0, Slo::default(), 3);
        assert_eq!(none.goodput.good_requests, 4);
        assert!((s.goodput.attainment - 0.4).abs() < 1e-12 && !s.goodput.meets_slo);
        // An end-to-end target: the records above end at ttft + 9 tpot.
        let e2e = Slo {
            e2e_ms: Some(300.0),
            ..Slo::default()
        };
        assert_eq!(
            Summary::from_records(&records, 2.0, e2e, 3)
                .goodput
                .good_requests,
            2
        );
    }
}
