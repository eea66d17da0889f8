//! The planner's vocabulary: the resources that can bind, the settings it varies (and the
//! server's defaults), its options, and the plan it returns with the reasoning behind it.

use serde::Serialize;

/// The resource that limits goodput.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Resource {
    /// Matmul work: long prompts, big batches.
    Compute,
    /// Streaming the weights (and cached K/V) from memory every step: small-batch decode.
    MemoryBandwidth,
    /// The KV pool: too few sequences fit.
    KvMemory,
}

impl std::fmt::Display for Resource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Resource::Compute => "compute",
            Resource::MemoryBandwidth => "memory_bandwidth",
            Resource::KvMemory => "kv_memory",
        })
    }
}

/// Why no rate meets the SLO.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    /// Without a TTFT or end-to-end target every rate "meets" the SLO (requests just queue).
    #[error(
        "the SLO needs a ttft or e2e target: without one, requests queue without limit and every rate meets it"
    )]
    NoLatencyBound,
    /// Even one request alone misses a target (or does not fit).
    #[error("no request rate meets the SLO: {resource} binds: {reason}")]
    Unattainable {
        /// The resource that binds.
        resource: Resource,
        /// The arithmetic that shows it.
        reason: String,
    },
}

/// The settings of `pagoda serve` the planner varies, and their defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Settings {
    /// `--max-num-seqs`.
    pub max_num_seqs: usize,
    /// `--max-num-batched-tokens`.
    pub max_num_batched_tokens: usize,
    /// `--long-prefill-token-threshold`.
    pub long_prefill_token_threshold: usize,
}

/// The server's defaults (crates/pagoda/src/engine_args.rs).
pub const DEFAULTS: Settings = Settings {
    max_num_seqs: 64,
    max_num_batched_tokens: 2048,
    long_prefill_token_threshold: 256,
};

/// How hard the planner looks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlanOptions {
    /// Requests per simulated run (as `pagoda bench --num-requests`).
    pub num_requests: usize,
    /// Seed of arrivals and lengths (as `pagoda bench --seed`).
    pub seed: u64,
    /// KV dtype the server will run (`f16`, `int8`, `f32`).
    pub kv_cache_dtype: &'static str,
    /// Bytes for the KV cache; default the profile's budget.
    pub kv_budget_bytes: Option<u64>,
    /// Requests per second the deployment must serve.
    pub target_rps: Option<f64>,
}

impl Default for PlanOptions {
    fn default() -> Self {
        Self {
            num_requests: 200,
            seed: 0,
            kv_cache_dtype: "f16",
            kv_budget_bytes: None,
            target_rps: None,
        }
    }
}

/// One setting's predicted capacity.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Candidate {
    /// The settings.
    pub settings: Settings,
    /// Highest arrival rate that meets the SLO, requests/s (0: none).
    pub max_rate_rps: f64,
    /// Goodput at that rate.
    pub goodput_rps: f64,
}

/// Replicas for a target rate.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Replicas {
    /// The rate asked for.
    pub target_rps: f64,
    /// Co-located replicas (each prefills and decodes).
    pub colocated: usize,
    /// With disaggregation: prefill replicas.
    pub prefill: usize,
    /// With disaggregation: decode replicas.
    pub decode: usize,
    /// Highest rate one prefill-only replica serves within the TTFT target.
    pub prefill_replica_rps: f64,
    /// Highest rate one decode-only replica serves within the TPOT target.
    pub decode_replica_rps: f64,
}

/// How much slower than profiled the steps of [`Plan::max_rate_rps_slower_steps`] are.
pub const SLOWER_STEPS: f64 = 1.1;

/// The plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    /// Goodput at the highest rate that meets the SLO with the recommended settings.
    pub max_goodput_rps: f64,
    /// That rate.
    pub max_rate_rps: f64,
    /// The highest rate meeting the SLO with the same settings if every step took
    /// [`SLOWER_STEPS`] times as long: a rate with a margin, for a machine whose step costs
    /// drift (this one's moved 10-20% between windows, and near a latency cliff the highest
    /// rate moves two to four times as much).
    pub max_rate_rps_slower_steps: f64,
    /// The resource that binds there.
    pub binding_resource: Resource,
    /// KV bytes held at the peak of the run at that rate.
    pub kv_bytes_needed: u64,
    /// KV bytes for `max_num_seqs` requests of the longest length at once (the bound).
    pub kv_bytes_at_max_num_seqs: u64,
    /// KV bytes the server has.
    pub kv_bytes_available: u64,
    /// The flags to pass to `pagoda serve`.
    pub recommended_flags: Vec<String>,
    /// The recommended settings.
    pub recommended: Candidate,
    /// The defaults, for comparison.
    pub defaults: Candidate,
    /// Every setting tried.
    pub candidates: Vec<Candidate>,
    /// Predicted latencies at the max rate, milliseconds.
    pub ttft_p99_ms: f64,
    /// Predicted TPOT p99 at the max rate, milliseconds.
    pub tpot_p99_ms: f64,
    /// Replicas for `--target-rps`.
    pub replicas: Option<Replicas>,
    /// How each figure follows.
    pub reasoning: Vec<String>,
}
