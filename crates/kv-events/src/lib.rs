//! KV cache events of one replica, published for routers and indexers: the `--kv-events-config`
//! JSON (vLLM's shape), the msgpack encoding of a `KVEventBatch`, and the ZeroMQ publisher
//! thread (PUB for the stream, ROUTER for replay).

pub mod config;
pub mod msgpack;
pub mod publisher;

pub use config::{ConfigError, KvEventsConfig};
pub use publisher::{KvEventsPublisher, PublishError};
