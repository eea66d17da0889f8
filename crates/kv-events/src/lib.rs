//! KV cache events of one replica, for routers and indexers: the `--kv-events-config` JSON
//! (vLLM's shape), the msgpack encoding of a `KVEventBatch` and its decoding, the ZeroMQ
//! publisher thread (PUB for the stream, ROUTER for replay) and a subscriber (SUB + replay).
//! Without the default `publisher` feature only the engine-free half is built.

pub mod config;
pub mod decode;
#[cfg(feature = "publisher")]
pub mod msgpack;
#[cfg(feature = "publisher")]
pub mod publisher;
pub mod subscriber;

pub use config::{ConfigError, KvEventsConfig};
pub use decode::{DecodeError, WireBatch, WireEvent, decode_batch};
#[cfg(feature = "publisher")]
pub use publisher::{KvEventsPublisher, PublishError};
pub use subscriber::{SubscribeTo, SubscriberEvent, subscribe};

/// The end-of-replay marker: sequence number -1 as a signed 8-byte integer.
pub const END_SEQ: [u8; 8] = [0xff; 8];
