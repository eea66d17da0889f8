//! What `--sweep` found (part of the report's JSON): every probe and the highest rate that
//! met the SLO.

use serde::{Deserialize, Serialize};

use pagoda_capacity::Slo;

/// One probe of the search.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SweepProbe {
    /// Offered rate, requests/s.
    pub rate: f64,
    /// Share of requests that met every target.
    pub attainment: f64,
    /// Good requests per second.
    pub goodput_rps: f64,
    /// Whether the probe met the SLO.
    pub meets_slo: bool,
}

/// What the sweep found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepResult {
    /// The targets.
    pub slo: Slo,
    /// Attainment a probe needed.
    pub attainment_needed: f64,
    /// Highest rate that met the SLO (none: not even the lowest probed).
    pub max_rate_rps: Option<f64>,
    /// Goodput of that probe (vLLM's: good requests per second of the run).
    pub max_goodput_rps: f64,
    /// Lowest rate that did not.
    pub lowest_failing_rps: Option<f64>,
    /// Every probe, in the order run.
    pub probes: Vec<SweepProbe>,
}
