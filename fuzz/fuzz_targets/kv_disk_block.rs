//! Fuzz a KV disk-tier block file found in `--kv-disk-dir`: the tier's start-up
//! scan and its read-back must keep the file or delete it, never panic or read out of bounds.

#![no_main]

include!("../inputs.rs");

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    inputs::kv_disk_block(data);
});
