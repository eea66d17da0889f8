//! `--kv-events-config`: vLLM's `KVEventsConfig` JSON, field for field, with its defaults.

use serde::Deserialize;

/// How (and whether) to publish KV cache events.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct KvEventsConfig {
    pub enable_kv_cache_events: bool,
    /// `zmq` (or `null`: record nothing).
    pub publisher: String,
    /// Where the PUB socket binds (`tcp://*:5557`; `*` means every interface).
    pub endpoint: String,
    /// Where the ROUTER socket for replay binds; none: no replay.
    pub replay_endpoint: Option<String>,
    /// Batches kept for replay.
    pub buffer_steps: usize,
    /// ZeroMQ's send high-water mark. Accepted for compatibility; the pure-Rust socket drops a
    /// slow subscriber's messages on its own bounded queue instead.
    pub hwm: usize,
    /// Batches waiting for the publisher thread before the engine drops them (and resyncs).
    pub max_queue_size: usize,
    /// First frame of every message.
    pub topic: String,
}

impl Default for KvEventsConfig {
    fn default() -> Self {
        Self {
            enable_kv_cache_events: false,
            publisher: "null".into(),
            endpoint: "tcp://*:5557".into(),
            replay_endpoint: None,
            buffer_steps: 10_000,
            hwm: 100_000,
            max_queue_size: 100_000,
            topic: String::new(),
        }
    }
}

/// A configuration that cannot work.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("--kv-events-config is not valid JSON for KV events: {0}")]
    Json(#[from] serde_json::Error),
    #[error("--kv-events-config: unknown publisher `{0}` (expected zmq or null)")]
    Publisher(String),
    #[error("--kv-events-config: `{field}` must be at least 1")]
    Zero { field: &'static str },
    #[error("--kv-events-config: `{0}` is not a tcp://host:port endpoint")]
    Endpoint(String),
}

impl KvEventsConfig {
    /// Parses and checks the JSON; `None` when events are off.
    pub fn parse(json: &str) -> Result<Option<Self>, ConfigError> {
        let mut c: Self = serde_json::from_str(json)?;
        match c.publisher.as_str() {
            // vLLM turns the publisher on when events are enabled with the default `null`.
            "null" if c.enable_kv_cache_events => c.publisher = "zmq".into(),
            "null" => return Ok(None),
            "zmq" => {}
            other => return Err(ConfigError::Publisher(other.into())),
        }
        if !c.enable_kv_cache_events {
            return Ok(None);
        }
        if c.max_queue_size == 0 {
            return Err(ConfigError::Zero {
                field: "max_queue_size",
            });
        }
        tcp_address(&c.endpoint)?;
        if let Some(r) = &c.replay_endpoint {
            tcp_address(r)?;
        }
        Ok(Some(c))
    }
}

/// `tcp://*:5557` as the socket wants it (`tcp://0.0.0.0:5557`).
pub fn tcp_address(endpoint: &str) -> Result<String, ConfigError> {
    let bad = || ConfigError::Endpoint(endpoint.to_string());
    let rest = endpoint.strip_prefix("tcp://").ok_or_else(bad)?;
    let (host, port) = rest.rsplit_once(':').ok_or_else(bad)?;
    port.parse::<u16>().map_err(|_| bad())?;
    let host = if host == "*" { "0.0.0.0" } else { host };
    if host.is_empty() {
        return Err(bad());
    }
    Ok(format!("tcp://{host}:{port}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vllm_shape_parses_and_bad_values_are_named() {
        let c = KvEventsConfig::parse(
            r#"{"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://*:5557",
                "replay_endpoint": "tcp://*:5558", "buffer_steps": 100, "hwm": 1000,
                "max_queue_size": 10, "topic": "kv"}"#,
        )
        .unwrap_or_default()
        .unwrap_or_default();
        assert_eq!(c.topic, "kv");
        assert_eq!(c.buffer_steps, 100);
        assert_eq!(
            tcp_address(&c.endpoint).ok().as_deref(),
            Some("tcp://0.0.0.0:5557")
        );
        assert!(matches!(
            KvEventsConfig::parse(r#"{"enable_kv_cache_events": false}"#),
            Ok(None)
        ));
        assert!(matches!(
            KvEventsConfig::parse(r#"{"enable_kv_cache_events": true, "publisher": "kafka"}"#),
            Err(ConfigError::Publisher(_))
        ));
        assert!(matches!(
            KvEventsConfig::parse(r#"{"enable_kv_cache_events": true, "endpoint": "5557"}"#),
            Err(ConfigError::Endpoint(_))
        ));
        assert!(matches!(
            KvEventsConfig::parse(r#"{"enable_kv_cache_event": true}"#),
            Err(ConfigError::Json(_))
        ));
    }
}
