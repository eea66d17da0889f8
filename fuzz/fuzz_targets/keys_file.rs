//! Fuzz the `--api-keys-file` parser: any text must give entries or an error naming the
//! problem, never a panic.

#![no_main]

include!("../inputs.rs");

libfuzzer_sys::fuzz_target!(|data: &[u8]| inputs::keys_file(data));
