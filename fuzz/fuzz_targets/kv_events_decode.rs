//! Fuzz the KV-event msgpack decoder, the router's reader of what replicas publish: any
//! input must give a batch or a typed error, never a panic.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = pagoda_kv_events::decode_batch(data);
});
