//! What every handler shares: the pool, the policy, the HTTP client to the replicas, the
//! prompt tokenizer and root hash for cache-aware keys, and the router's counters.

use std::sync::Arc;

use pagoda_block_hash::{BlockHash, root_hash};

use crate::config::{PolicyKind, RouterConfig};
use crate::metrics::RouterMetrics;
use crate::policy::{self, Policy};
use crate::pool::Pool;
use crate::prompt::PromptTokenizer;

/// Shared by the handlers (behind an `Arc`).
pub struct RouterState {
    pub pool: Arc<Pool>,
    pub policy: Box<dyn Policy>,
    pub policy_kind: PolicyKind,
    pub client: reqwest::Client,
    /// Set for `cache_aware` (the other policies never tokenize).
    pub tokenizer: Option<Arc<PromptTokenizer>>,
    /// The replicas' root hash (from their `--prefix-cache-hash-seed`).
    pub root: BlockHash,
    /// The replicas' tenants' salts (`--tenant-api-key`, `--tenant-keys-file`).
    pub tenant_salts: Option<Arc<crate::tenant_salts::TenantSalts>>,
    /// The router's own key (`--router-key`), sent to every replica in `x-pagoda-router-key`.
    pub router_key: Option<axum::http::HeaderValue>,
    pub metrics: RouterMetrics,
    /// Prefill replicas (`--prefill`); empty: no prefill/decode disaggregation.
    pub prefill: Arc<Pool>,
    pub pd_threshold: usize,
    pub pd_prefill_timeout: std::time::Duration,
    pub pd_metrics: crate::pd_metrics::PdMetrics,
}

impl RouterState {
    /// From a checked config; the pool is filled by the caller.
    pub fn new(config: &RouterConfig, pool: Arc<Pool>) -> Result<Self, reqwest::Error> {
        let client = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            // Loopback and cluster addresses: never through an environment proxy.
            .no_proxy()
            .tcp_nodelay(true)
            .build()?;
        // Cache-aware routing needs the prompt's tokens, and so does the PD threshold.
        let tokenizer = match config.policy {
            PolicyKind::CacheAware => config.tokenizer.clone(),
            _ if !config.prefill.is_empty() && config.pd_threshold > 0 => config.tokenizer.clone(),
            _ => None,
        };
        let prefill = Arc::new(Pool::default());
        for w in &config.prefill {
            prefill.add(w.clone());
        }
        Ok(Self {
            pool,
            policy: policy::build(config),
            policy_kind: config.policy,
            client,
            tokenizer,
            root: root_hash(&config.hash_seed),
            tenant_salts: config.tenant_salts.clone(),
            router_key: config
                .router_key
                .as_deref()
                .and_then(|k| axum::http::HeaderValue::from_str(k).ok()),
            metrics: RouterMetrics::default(),
            prefill,
            pd_threshold: config.pd_threshold,
            pd_prefill_timeout: config.pd_prefill_timeout,
            pd_metrics: Default::default(),
        })
    }
}
