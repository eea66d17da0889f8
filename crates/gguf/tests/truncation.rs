//! Cutting a valid file at any byte gives an error, never a panic: every section ends at a
//! position the parser checks, and the last tensor's data ends the file.

#![allow(clippy::unwrap_used)] // tests may unwrap

use crate::common;

use pagoda_gguf::GgufFile;

#[test]
fn truncation_at_every_byte_offset_is_an_error() {
    for (name, bytes) in [
        ("v3", common::small_model().to_bytes()),
        ("v2", common::small_model().version(2).to_bytes()),
    ] {
        assert!(GgufFile::from_bytes(bytes.clone()).is_ok());
        for len in 0..bytes.len() {
            let result = std::panic::catch_unwind(|| GgufFile::from_bytes(bytes[..len].to_vec()));
            match result {
                Ok(Err(e)) => assert!(!e.to_string().is_empty()),
                Ok(Ok(_)) => panic!("{name} truncated to {len} of {} bytes parsed", bytes.len()),
                Err(_) => panic!("{name} truncated to {len} bytes panicked"),
            }
        }
    }
}

#[test]
fn every_single_byte_flip_is_handled_without_panic() {
    let bytes = common::small_model().to_bytes();
    let header_and_infos = GgufFile::from_bytes(bytes.clone()).unwrap().data_offset() as usize;
    for at in 0..header_and_infos {
        for flip in [0x01u8, 0x80, 0xff] {
            let mut corrupt = bytes.clone();
            corrupt[at] ^= flip;
            let result = std::panic::catch_unwind(|| {
                GgufFile::from_bytes(corrupt).map(|f| f.tensors().len())
            });
            assert!(result.is_ok(), "flipping byte {at} with {flip:#x} panicked");
        }
    }
}
