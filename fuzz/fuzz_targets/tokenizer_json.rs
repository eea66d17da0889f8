//! Fuzz the tokenizer.json reader (a checkpoint's tokenizer is untrusted): any text must give
//! a tokenizer or an error, and a tokenizer must encode and decode a fixed sentence without a
//! panic.

#![no_main]

include!("../inputs.rs");

libfuzzer_sys::fuzz_target!(|data: &[u8]| inputs::tokenizer_json(data));
