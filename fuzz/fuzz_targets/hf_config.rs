//! Fuzz a checkpoint's config.json (beside empty weights) through `pagoda_hf::convert`:
//! any bytes must give a GGUF or an error naming the problem, never a panic or a hang.

#![no_main]

include!("../inputs.rs");

libfuzzer_sys::fuzz_target!(|data: &[u8]| inputs::hf_config(data));
