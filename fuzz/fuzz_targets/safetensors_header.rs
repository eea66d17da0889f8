//! Fuzz the safetensors reader (a checkpoint's weights are untrusted): the input is written to
//! a file in memory-backed storage and opened; every tensor it lists must then hand out
//! in-bounds data of its declared size, never a panic or a read past the map.

#![no_main]

include!("../inputs.rs");

libfuzzer_sys::fuzz_target!(|data: &[u8]| inputs::safetensors_header(data));
