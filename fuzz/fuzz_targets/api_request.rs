//! Fuzz the request bodies of the three APIs (chat and completions, Anthropic Messages,
//! Responses) through the server's own parse and prepare, with SmolLM2 loaded: any body must
//! be prepared or refused with an error naming the problem, never panic or hang.

#![no_main]

include!("../inputs.rs");

libfuzzer_sys::fuzz_target!(|data: &[u8]| inputs::api_request(data));
