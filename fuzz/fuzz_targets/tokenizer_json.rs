//! Fuzz the tokenizer.json reader (a checkpoint's tokenizer is untrusted): any text must give
//! a tokenizer or an error, and a tokenizer must encode and decode a fixed sentence without a
//! panic.

#![no_main]

use libfuzzer_sys::fuzz_target;
use pagoda_frontend::HfTokenizer;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(tok) = HfTokenizer::from_json(text) {
        if let Ok(ids) = tok.encode("The quick brown fox, 123 ünïcode.") {
            let _ = std::hint::black_box(tok.decode(&ids));
        }
    }
});
