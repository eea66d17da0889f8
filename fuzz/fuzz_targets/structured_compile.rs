//! Fuzz JSON-schema, regex, Lark-grammar and choice constraints through
//! `StructuredOutputs::compile` (llguidance under pagoda's limits) and a matcher's first masks:
//! a value or an error naming the problem, never a panic, a hang or unbounded memory.

#![no_main]

include!("../inputs.rs");

libfuzzer_sys::fuzz_target!(|data: &[u8]| inputs::structured_compile(data));
