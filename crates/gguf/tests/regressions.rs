//! Inputs that once crashed or misbehaved under fuzzing (fuzz/README.md), plus hand-made hostile
//! files: each must be rejected with an error, without a panic.

#![allow(clippy::unwrap_used)] // tests may unwrap

use std::path::Path;

use pagoda_gguf::GgufFile;

#[test]
fn regression_inputs_are_rejected_without_panic() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("regressions");
    let mut entries: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "input"))
        .collect();
    entries.sort();
    assert!(
        !entries.is_empty(),
        "no regression inputs in {}",
        dir.display()
    );
    for path in entries {
        let bytes = std::fs::read(&path).unwrap();
        let result = std::panic::catch_unwind(|| GgufFile::from_bytes(bytes));
        match result {
            Ok(Err(e)) => eprintln!("{}: {e}", path.display()),
            Ok(Ok(f)) => panic!("{} parsed: {f:?}", path.display()),
            Err(_) => panic!("{} panicked", path.display()),
        }
    }
}
