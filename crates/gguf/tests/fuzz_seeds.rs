//! The fuzz seed files parse; with `PAGODA_FUZZ_SEED_DIR` set, they are also written there
//! (see fuzz/README.md).

#![allow(clippy::unwrap_used)] // tests may unwrap

use crate::common;

use pagoda_gguf::GgufFile;

#[test]
fn seed_files_are_valid_and_written_on_request() {
    let out_dir = std::env::var_os("PAGODA_FUZZ_SEED_DIR").map(std::path::PathBuf::from);
    for (name, bytes) in common::seed_files() {
        let file =
            GgufFile::from_bytes(bytes.clone()).unwrap_or_else(|e| panic!("seed {name}: {e}"));
        assert_eq!(file.file_len() as usize, bytes.len());
        if let Some(dir) = &out_dir {
            std::fs::create_dir_all(dir).unwrap();
            std::fs::write(dir.join(name), &bytes).unwrap();
        }
    }
}
