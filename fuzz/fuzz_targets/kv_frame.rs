//! Fuzz the KV transfer frame codec, a decode replica's first reader of network bytes: any
//! input must give frames or a typed error, never a panic or an allocation past the bound.

#![no_main]

include!("../inputs.rs");

libfuzzer_sys::fuzz_target!(|data: &[u8]| inputs::kv_frame(data));
