//! Fuzz a PEFT adapter_config.json (beside empty weights) through
//! `pagoda_hf::convert_lora`: any bytes must give an adapter or an error, never a panic.

#![no_main]

include!("../inputs.rs");

libfuzzer_sys::fuzz_target!(|data: &[u8]| inputs::peft_config(data));
