//! What the router is told: its replicas (static `--worker` specs, or a DNS name re-resolved
//! periodically), the policy and its knobs. Built once by the binary from its flags.

use std::sync::Arc;
use std::time::Duration;

use pagoda_kv_events::SubscribeTo;

use crate::error::ConfigError;
use crate::prompt::PromptTokenizer;

/// Which replica gets a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicyKind {
    RoundRobin,
    LeastLoad,
    CacheAware,
}

impl PolicyKind {
    /// `round_robin`, `least_load` or `cache_aware`.
    pub fn parse(s: &str) -> Result<Self, ConfigError> {
        match s {
            "round_robin" => Ok(Self::RoundRobin),
            "least_load" => Ok(Self::LeastLoad),
            "cache_aware" => Ok(Self::CacheAware),
            other => Err(ConfigError::Policy(other.to_string())),
        }
    }

    /// The name in flags and metrics.
    pub fn name(self) -> &'static str {
        match self {
            Self::RoundRobin => "round_robin",
            Self::LeastLoad => "least_load",
            Self::CacheAware => "cache_aware",
        }
    }
}

/// One replica: its HTTP base URL and, for cache-aware routing, where it publishes KV events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerSpec {
    /// `http://host:port`, no trailing slash.
    pub url: String,
    pub events: Option<SubscribeTo>,
    /// A decode replica's KV transfer endpoint (`host:port`, its `--kv-transfer-port`):
    /// prefill replicas ship prompts' KV there. `None`: it only prefills its own requests.
    pub kv: Option<String>,
}

impl WorkerSpec {
    /// `URL[,events=tcp://host:port][,replay=tcp://host:port][,topic=T][,kv=host:port]`: the
    /// replica's `--kv-events-config` `endpoint` and `replay_endpoint` as reachable from the
    /// router, and (a decode replica) its KV transfer endpoint as reachable from the prefill
    /// replicas.
    pub fn parse(spec: &str) -> Result<Self, ConfigError> {
        let bad = |why: &str| ConfigError::Worker {
            spec: spec.to_string(),
            why: why.to_string(),
        };
        let mut parts = spec.split(',');
        let url = parts.next().unwrap_or_default().trim_end_matches('/');
        if !(url.starts_with("http://") || url.starts_with("https://")) || url.len() < 8 {
            return Err(bad("the first part must be an http:// URL"));
        }
        let (mut events, mut replay, mut topic, mut kv) = (None, None, String::new(), None);
        for p in parts {
            let (k, v) = p.split_once('=').ok_or_else(|| bad("expected key=value"))?;
            let tcp = |v: &str| {
                if v.starts_with("tcp://") && v.rsplit_once(':').is_some() {
                    Ok(v.to_string())
                } else {
                    Err(bad("events endpoints are tcp://host:port"))
                }
            };
            match k {
                "events" => events = Some(tcp(v)?),
                "replay" => replay = Some(tcp(v)?),
                "topic" => topic = v.to_string(),
                "kv" => match v.rsplit_once(':') {
                    Some((h, p)) if !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p > 0) => {
                        kv = Some(v.to_string());
                    }
                    _ => {
                        return Err(bad(
                            "kv= is host:port (the decode replica's --kv-transfer-port)",
                        ));
                    }
                },
                _ => return Err(bad("known keys are events, replay, topic and kv")),
            }
        }
        if events.is_none() && replay.is_some() {
            return Err(bad("replay= needs events="));
        }
        Ok(Self {
            url: url.to_string(),
            events: events.map(|endpoint| SubscribeTo {
                endpoint,
                replay_endpoint: replay,
                topic,
            }),
            kv,
        })
    }

    /// `--decode SPEC`: a `--worker` spec that is a decode replica, its transfer endpoint on
    /// the URL's host at port 7100 (the replicas' default) unless `kv=` says otherwise.
    pub fn parse_decode(spec: &str) -> Result<Self, ConfigError> {
        let mut w = Self::parse(spec)?;
        if w.kv.is_none() {
            let rest = w.url.split_once("://").map_or("", |(_, r)| r);
            let host = match rest.rsplit_once(':') {
                Some((h, p)) if p.chars().all(|c| c.is_ascii_digit()) => h,
                _ => rest,
            };
            w.kv = Some(format!("{host}:{DEFAULT_KV_PORT}"));
        }
        Ok(w)
    }
}

/// The replicas' default `--kv-transfer-port`.
pub const DEFAULT_KV_PORT: u16 = 7100;

/// `--worker-dns NAME:PORT`: every address of NAME is a replica on PORT (a Kubernetes headless
/// Service), with its events on the given ports of the same address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DnsWorkers {
    pub name: String,
    pub port: u16,
    pub events_port: Option<u16>,
    pub replay_port: Option<u16>,
    /// `--dns-kv-port`: the replicas are decode replicas with this KV transfer port.
    pub kv_port: Option<u16>,
    /// How often the name is resolved again.
    pub interval: Duration,
}

impl DnsWorkers {
    /// Splits `NAME:PORT`.
    pub fn parse(spec: &str, interval: Duration) -> Result<Self, ConfigError> {
        let bad = || ConfigError::Worker {
            spec: spec.to_string(),
            why: "expected NAME:PORT".to_string(),
        };
        let (name, port) = spec.rsplit_once(':').ok_or_else(bad)?;
        let port = port.parse().map_err(|_| bad())?;
        if name.is_empty() {
            return Err(bad());
        }
        Ok(Self {
            name: name.to_string(),
            port,
            events_port: None,
            replay_port: None,
            kv_port: None,
            interval,
        })
    }

    /// The spec of the replica at `ip`.
    pub fn worker(&self, ip: std::net::IpAddr) -> WorkerSpec {
        let host = match ip {
            std::net::IpAddr::V6(v6) => format!("[{v6}]"),
            v4 => v4.to_string(),
        };
        WorkerSpec {
            url: format!("http://{host}:{}", self.port),
            events: self.events_port.map(|p| SubscribeTo {
                endpoint: format!("tcp://{host}:{p}"),
                replay_endpoint: self.replay_port.map(|r| format!("tcp://{host}:{r}")),
                topic: String::new(),
            }),
            kv: self.kv_port.map(|p| format!("{host}:{p}")),
        }
    }
}

/// Cache-aware scoring (Dynamo's cost) and the balance override (SGLang's rule).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CacheAwareTuning {
    /// Blocks of prefill one request in flight is worth: cost = uncached prompt blocks +
    /// `decode_weight` x the replica's requests in flight.
    pub decode_weight: f64,
    /// Load is skewed (route by load alone) when max - min > `balance_abs` requests ...
    pub balance_abs: usize,
    /// ... and max > `balance_rel` x min.
    pub balance_rel: f64,
}

impl Default for CacheAwareTuning {
    fn default() -> Self {
        Self {
            decode_weight: 4.0,
            balance_abs: 8,
            balance_rel: 2.0,
        }
    }
}

/// Everything the router runs with.
#[derive(Clone)]
pub struct RouterConfig {
    pub workers: Vec<WorkerSpec>,
    pub dns: Option<DnsWorkers>,
    pub policy: PolicyKind,
    /// The model's tokenizer and chat template (needed by `cache_aware`).
    pub tokenizer: Option<Arc<PromptTokenizer>>,
    /// The replicas' `--prefix-cache-hash-seed`.
    pub hash_seed: String,
    /// The replicas' tenants' salts, from their `--api-key` and `--api-keys-file`
    /// (`--tenant-api-key`, `--tenant-keys-file`).
    pub tenant_salts: Option<Arc<crate::tenant_salts::TenantSalts>>,
    /// A key with the `router` scope on the replicas (`--router-key`): proves to them that
    /// the `kv_transfer_params` of prefill/decode hops come from this router.
    pub router_key: Option<String>,
    pub tuning: CacheAwareTuning,
    /// How often each replica's /ready and /metrics are read.
    pub poll_interval: Duration,
    /// Connection timeout to a replica (a refused or silent one is retried on another).
    pub connect_timeout: Duration,
    /// Largest request body accepted.
    pub max_request_bytes: usize,
    /// Prefill replicas (`--prefill URL`): with any, prompts go through prefill/decode
    /// disaggregation to the workers that have a `kv=` endpoint.
    pub prefill: Vec<WorkerSpec>,
    /// Prompts whose part the chosen decode replica has not cached is below this many tokens
    /// are prefilled there (`--pd-threshold`).
    pub pd_threshold: usize,
    /// Longest wait for a prefill replica's answer before the decode replica prefills itself.
    pub pd_prefill_timeout: Duration,
}

impl RouterConfig {
    /// Checks that the pieces fit together.
    pub fn check(&self) -> Result<(), ConfigError> {
        if self.workers.is_empty() && self.dns.is_none() {
            return Err(ConfigError::NoWorkers);
        }
        if self.policy == PolicyKind::CacheAware && self.tokenizer.is_none() {
            return Err(ConfigError::CacheAwareNeedsModel);
        }
        if !self.prefill.is_empty() && self.pd_threshold > 0 && self.tokenizer.is_none() {
            return Err(ConfigError::PdNeedsModel);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_specs_parse_and_bad_ones_are_named() {
        let w = WorkerSpec::parse(
            "http://10.0.0.1:8000/,events=tcp://10.0.0.1:5557,replay=tcp://10.0.0.1:5558",
        );
        let w = w.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(w.url, "http://10.0.0.1:8000");
        let ev = w.events.unwrap_or_else(|| panic!("events"));
        assert_eq!(ev.replay_endpoint.as_deref(), Some("tcp://10.0.0.1:5558"));
        assert!(WorkerSpec::parse("10.0.0.1:8000").is_err());
        assert!(WorkerSpec::parse("http://a:1,events=5557").is_err());
        assert!(WorkerSpec::parse("http://a:1,foo=bar").is_err());
        let d = DnsWorkers::parse("engine.ns.svc:8000", Duration::from_secs(5));
        let d = d.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(d.worker([10, 1, 2, 3].into()).url, "http://10.1.2.3:8000");
        assert!(DnsWorkers::parse("engine", Duration::from_secs(5)).is_err());
        assert!(PolicyKind::parse("random").is_err());
        let d = WorkerSpec::parse("http://10.0.0.2:8000,kv=10.0.0.2:7200");
        assert_eq!(
            d.unwrap_or_else(|e| panic!("{e}")).kv.as_deref(),
            Some("10.0.0.2:7200")
        );
        assert!(WorkerSpec::parse("http://a:1,kv=a").is_err());
        assert!(WorkerSpec::parse("http://a:1,kv=a:0").is_err());
        let d = WorkerSpec::parse_decode("http://10.0.0.3:8000").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(d.kv.as_deref(), Some("10.0.0.3:7100"));
    }
}
