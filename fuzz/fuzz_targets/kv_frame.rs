//! Fuzz the KV transfer frame codec, a decode replica's first reader of network bytes: any
//! input must give frames or a typed error, never a panic or an allocation past the bound.

#![no_main]

use libfuzzer_sys::fuzz_target;
use pagoda_model::kv::transfer::{Frame, Seal};

fuzz_target!(|data: &[u8]| {
    let mut r = data;
    // The receiver's bounds: a Begin of at most 64 + 256 bytes, blocks of 32 + 4 KiB here.
    while let Ok(Some(f)) = Frame::read_from(&mut r, 32 + 4096, &mut Seal::Checksum) {
        // A frame read back must encode to bytes that read back as the same frame.
        let again = Frame::read_from(&mut &f.encode(&mut Seal::Checksum)[..], 1 << 20, &mut Seal::Checksum);
        assert!(matches!(again, Ok(Some(ref g)) if *g == f));
    }
});
