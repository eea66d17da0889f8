//! The Kubernetes manifests in deploy/kubernetes, checked by a real validator
//! (kubernetes-validate from PyPI, installed by scripts/test.sh) against the Kubernetes schemas,
//! and their containers' flags against this build's `pagoda <subcommand> --help` (`serve` for
//! the engines, `router` for router.yaml).

use std::path::PathBuf;
use std::process::Command;

#[test]
fn every_manifest_validates_and_uses_real_flags() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let out = Command::new(&python)
        .arg(root.join("deploy/kubernetes/validate.py"))
        .args(["--pagoda", env!("CARGO_BIN_EXE_pagoda")])
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "manifests do not validate (install the validator with \
         python3 -m pip install kubernetes-validate):\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains(", 0 errors"), "{stdout}");
    // router.yaml's container runs `pagoda router`: its flags were checked against this help.
    let help = Command::new(env!("CARGO_BIN_EXE_pagoda"))
        .args(["router", "--help"])
        .output()
        .expect("pagoda runs");
    let help = String::from_utf8_lossy(&help.stdout);
    let manifest = std::fs::read_to_string(root.join("deploy/kubernetes/router.yaml"))
        .expect("router.yaml exists");
    assert!(
        manifest.contains("- router") && help.contains("--worker-dns"),
        "{help}"
    );
}
