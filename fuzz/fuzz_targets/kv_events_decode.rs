//! Fuzz the KV-event msgpack decoder, the router's reader of what replicas publish: any
//! input must give a batch or a typed error, never a panic.

#![no_main]

include!("../inputs.rs");

libfuzzer_sys::fuzz_target!(|data: &[u8]| inputs::kv_events_decode(data));
