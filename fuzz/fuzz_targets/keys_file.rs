//! Fuzz the `--api-keys-file` parser: any text must give entries or an error naming the
//! problem, never a panic.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = pagoda_api_keys::keys_file::parse(text);
    }
});
