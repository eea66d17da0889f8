//! Conformance with the official `openai` Python client: starts the real server (and a second
//! one with an API key) in-process with the real model, then runs `openai_conformance.py`
//! against both and fails with the script's output if any of its checks fails.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::path::Path;
use std::process::Command;

use common::TestServer;
use pagoda_server::ServerConfig;

const API_KEY: &str = "sk-conformance";

#[test]
fn openai_python_client_conformance() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/openai_conformance.py");
    // scripts/test.sh installs the client; $PYTHON picks another interpreter.
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let probe = Command::new(&python)
        .args(["-c", "import openai"])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {python}: {e}"));
    assert!(
        probe.status.success(),
        "the `openai` Python package is missing (scripts/test.sh installs it: \
         python3 -m pip install \"openai>=1.50,<2\"): {}",
        String::from_utf8_lossy(&probe.stderr)
    );

    let open = TestServer::start(common::small_setup(), common::config());
    let keyed = TestServer::start(
        common::small_setup(),
        ServerConfig {
            api_key: Some(API_KEY.to_owned()),
            ..common::config()
        },
    );
    let out = Command::new(&python)
        .arg(&script)
        .args(["--base-url", &open.url("/v1")])
        .args(["--auth-base-url", &keyed.url("/v1")])
        .args(["--auth-key", API_KEY])
        // The servers are local: an HTTP(S)_PROXY in the environment must not reroute them.
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("no_proxy", "127.0.0.1,localhost")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    eprintln!("{stderr}");
    for s in [&open, &keyed] {
        s.stop();
        s.join().unwrap();
    }
    assert!(
        out.status.success(),
        "openai_conformance.py failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
}
