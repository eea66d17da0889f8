//! Runs an independent Python reference (a numpy forward pass beside a crate's tests) on a
//! model directory: JSON in on stdin, JSON out on stdout, `$PYTHON` (default python3).

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

/// The output of `script DIR` given `input`; panics with its stderr if it fails (a test helper).
#[allow(clippy::unwrap_used)]
pub fn python_reference(script: &Path, dir: &Path, input: &serde_json::Value) -> serde_json::Value {
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let mut child = single_threaded_blas(Command::new(python))
        .arg(script)
        .arg(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let input = serde_json::to_vec(input).unwrap();
    child.stdin.take().unwrap().write_all(&input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}: {}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `command` with numpy's BLAS on one thread. The references run beside other tests on 2 cores,
/// where OpenBLAS's worker threads spin waiting for work: EmbeddingGemma's reference took 64
/// CPU-seconds with them and 20 without (docs/testing.md, seventh round).
pub fn single_threaded_blas(mut command: Command) -> Command {
    for var in ["OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"] {
        command.env(var, "1");
    }
    command
}
