//! Fuzz `GgufFile::from_bytes`: any input must give `Ok` or `Err`, never a panic, and an `Ok`
//! file must hand out in-bounds tensor data and answer every getter on every key.

#![no_main]

include!("../inputs.rs");

libfuzzer_sys::fuzz_target!(|data: &[u8]| inputs::gguf_parse(data));
