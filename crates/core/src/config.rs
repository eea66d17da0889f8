//! Engine configuration, resolved: every value here is final (defaults applied, budgets turned
//! into block counts). Parsing of human sizes like `2GiB` lives here too, so the command line and
//! the server read them the same way.

use thiserror::Error;

use crate::kv::KvGroup;

/// How the scheduler spends each step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchedulerConfig {
    /// Tokens computed per step, over all sequences.
    pub max_num_batched_tokens: usize,
    /// Sequences per step.
    pub max_num_seqs: usize,
    /// Most prompt tokens one sequence computes in a step (0 = no cap): a long prompt is chunked
    /// so the decodes running beside it are not stalled for its whole prefill.
    pub long_prefill_token_threshold: usize,
    /// Requests allowed to wait; beyond it new ones are rejected.
    pub max_waiting_requests: usize,
    /// Longest sequence (prompt + generated) the model takes.
    pub max_model_len: usize,
    /// The order in which waiting requests are admitted.
    pub policy: SchedulingPolicy,
    /// Most distinct LoRA adapters among running sequences (`--max-loras`); a waiting request
    /// of another adapter waits, base-model requests never do. 0: no limit.
    pub max_loras: usize,
    /// Context shift (`--context-shift --keep N`): a sequence that reaches `max_model_len` keeps
    /// its first N tokens and its recent half instead of stopping; `None` stops it (`length`).
    pub context_shift_keep: Option<usize>,
}

/// How the waiting queue is ordered (running sequences always go first).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SchedulingPolicy {
    /// First come, first served.
    #[default]
    Fcfs,
    /// By the request's `priority` (lower first), then arrival.
    Priority,
    /// Deficit round robin over tenants in tokens computed (prompt + generated), weighted by
    /// each tenant's weight; FCFS within a tenant.
    Fair,
}

impl SchedulingPolicy {
    /// The command-line spelling.
    pub fn name(self) -> &'static str {
        match self {
            Self::Fcfs => "fcfs",
            Self::Priority => "priority",
            Self::Fair => "fair",
        }
    }
}

impl std::str::FromStr for SchedulingPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "fcfs" => Ok(Self::Fcfs),
            "priority" => Ok(Self::Priority),
            "fair" => Ok(Self::Fair),
            _ => Err(format!(
                "unknown scheduling policy `{s}` (expected fcfs, priority or fair)"
            )),
        }
    }
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        Self {
            max_num_batched_tokens: 2048,
            max_num_seqs: 64,
            // ~1.3 s of prefill on 2 cores: the bound on how long a running decode waits.
            long_prefill_token_threshold: 256,
            max_waiting_requests: 1024,
            max_model_len: 8192,
            policy: SchedulingPolicy::Fcfs,
            max_loras: 0,
            context_shift_keep: None,
        }
    }
}

/// The KV block pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheConfig {
    pub block_size: usize,
    pub num_blocks: usize,
    pub enable_prefix_caching: bool,
    /// How the layers' KV is grouped (one block table per group and sequence); one
    /// full-attention group unless the model has sliding-window layers that free blocks.
    pub groups: Vec<KvGroup>,
    /// Root of the block-hash chain (`--prefix-cache-hash-seed`): replicas and a router that
    /// share it compute the same hashes for the same tokens.
    pub hash_seed: String,
}

/// A configuration value that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ConfigError {
    #[error("`{field}` must be {bound}, got {value}")]
    OutOfRange {
        field: &'static str,
        bound: String,
        value: String,
    },
    #[error("cannot read `{0}` as a size (examples: 2GiB, 512MiB, 1.5GB, 1000000)")]
    BadSize(String),
}

impl SchedulerConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        let positive = |field, v: usize| {
            if v == 0 {
                Err(ConfigError::OutOfRange {
                    field,
                    bound: ">= 1".into(),
                    value: "0".into(),
                })
            } else {
                Ok(())
            }
        };
        positive("max_num_batched_tokens", self.max_num_batched_tokens)?;
        positive("max_num_seqs", self.max_num_seqs)?;
        positive("max_model_len", self.max_model_len)?;
        Ok(())
    }
}

impl CacheConfig {
    /// Blocks of `block_size` tokens that fit in `budget_bytes` at `bytes_per_token` (the K
    /// and V of the layers one block serves: all of them with a single group).
    pub fn from_budget(
        budget_bytes: u64,
        bytes_per_token: u64,
        block_size: usize,
        enable_prefix_caching: bool,
    ) -> Result<Self, ConfigError> {
        if !(1..=1024).contains(&block_size) {
            return Err(ConfigError::OutOfRange {
                field: "block_size",
                bound: "in [1, 1024]".into(),
                value: block_size.to_string(),
            });
        }
        let per_block = bytes_per_token.max(1) * block_size as u64;
        let num_blocks = (budget_bytes / per_block).min(u64::from(u32::MAX - 1)) as usize;
        if num_blocks == 0 {
            return Err(ConfigError::OutOfRange {
                field: "kv_cache_memory",
                bound: format!("at least one block ({per_block} bytes)"),
                value: format!("{budget_bytes} bytes"),
            });
        }
        Ok(Self {
            block_size,
            num_blocks,
            enable_prefix_caching,
            groups: vec![KvGroup::FULL],
            hash_seed: crate::kv::block_hash::DEFAULT_HASH_SEED.to_string(),
        })
    }
}

/// Parses `2GiB`, `512MiB`, `1.5GB`, `800k`, `1000000` (bytes) into bytes.
pub fn parse_size(text: &str) -> Result<u64, ConfigError> {
    let s = text.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| ConfigError::BadSize(text.to_string()))?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "m" | "mb" => 1e6,
        "g" | "gb" => 1e9,
        "t" | "tb" => 1e12,
        "ki" | "kib" => 1024.0,
        "mi" | "mib" => 1024.0 * 1024.0,
        "gi" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "ti" | "tib" => 1024.0f64.powi(4),
        _ => return Err(ConfigError::BadSize(text.to_string())),
    };
    let bytes = value * mult;
    if !(1.0..=1e18).contains(&bytes) {
        return Err(ConfigError::BadSize(text.to_string()));
    }
    Ok(bytes as u64)
}

/// `MemAvailable` from /proc/meminfo, if readable.
pub fn available_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Default KV budget: a quarter of available memory, at most 4 GiB (vLLM's CPU default), so
/// the weights, activations and the rest of the machine keep room.
pub fn default_kv_budget() -> u64 {
    const CAP: u64 = 4 << 30;
    available_memory().map_or(1 << 30, |m| (m / 4).min(CAP))
}

/// Rejects a budget larger than the memory the machine has available.
pub fn check_kv_budget(budget: u64) -> Result<(), ConfigError> {
    match available_memory() {
        Some(avail) if budget > avail => Err(ConfigError::OutOfRange {
            field: "kv_cache_memory",
            bound: format!("at most the available memory ({avail} bytes)"),
            value: format!("{budget} bytes"),
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("1.5GB"), Ok(1_500_000_000));
        assert_eq!(parse_size("1000"), Ok(1000));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("0").is_err());
        assert!(parse_size("2XB").is_err());
    }

    #[test]
    fn budget_becomes_blocks() {
        let c = CacheConfig::from_budget(1 << 20, 1024, 16, true);
        assert_eq!(c.map(|c| c.num_blocks), Ok(64));
        assert!(CacheConfig::from_budget(100, 1024, 16, true).is_err());
        assert!(CacheConfig::from_budget(1 << 20, 1024, 0, true).is_err());
    }
}
