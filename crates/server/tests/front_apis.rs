//! The Messages and Responses APIs, and tool round trips, through the official Python SDKs
//! (`anthropic`, `openai`) against the real server on Qwen2.5-Coder-0.5B (a tool-trained
//! model): one loaded server shared by the whole binary, plus an unloaded keyed one for
//! `x-api-key`. Each test runs one script and fails with its output if a check failed.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use common::TestServer;
use pagoda_server::ServerConfig;

const API_KEY: &str = "sk-front-apis";

/// The binary's Qwen server, shared by every file that needs a tool-trained model.
pub fn qwen() -> &'static TestServer {
    static S: OnceLock<TestServer> = OnceLock::new();
    S.get_or_init(|| {
        TestServer::start_model(common::qwen_path(), common::small_setup(), common::config())
    })
}

fn python() -> String {
    std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_owned())
}

/// Runs `script` with `args`; panics with its output unless every check passed.
fn run_script(script: &str, package: &str, args: &[&str]) {
    run_script_with(&python(), script, package, args);
}

/// [`run_script`] with the interpreter `py`.
pub fn run_script_with(py: &str, script: &str, package: &str, args: &[&str]) {
    let probe = Command::new(py)
        .args(["-c", &format!("import {package}")])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {py}: {e}"));
    assert!(
        probe.status.success(),
        "the `{package}` Python package is missing (scripts/test.sh installs it): {}",
        String::from_utf8_lossy(&probe.stderr)
    );
    let path: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(script);
    let out = Command::new(py)
        .arg(&path)
        .args(args)
        // The servers are local: an HTTP(S)_PROXY in the environment must not reroute them.
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("no_proxy", "127.0.0.1,localhost")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    eprintln!("{stderr}");
    assert!(
        out.status.success(),
        "{script} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
}

#[test]
fn anthropic_sdk_conformance() {
    let keyed = TestServer::start_unloaded(ServerConfig {
        api_key: Some(API_KEY.to_owned()),
        ..common::config()
    });
    run_script(
        "anthropic_conformance.py",
        "anthropic",
        &[
            "--base-url",
            &qwen().base,
            "--model",
            common::MODEL,
            "--auth-base-url",
            &keyed.base,
            "--auth-key",
            API_KEY,
        ],
    );
}

#[test]
fn openai_responses_conformance() {
    run_script(
        "responses_conformance.py",
        "openai",
        &["--base-url", &qwen().url("/v1"), "--model", common::MODEL],
    );
}

/// Call -> result -> answer under `tool_choice: "auto"`, plus named and single-call choices.
/// Another tool-trained model is one more test like this one, over its own server.
#[test]
fn qwen_05b_tool_round_trip() {
    run_script(
        "tool_round_trip.py",
        "openai",
        &["--base-url", &qwen().url("/v1"), "--model", common::MODEL],
    );
}

/// Qwen2.5-Coder-1.5B's own tool call under `tool_choice: "auto"` (free text the parser must
/// find the call in), whole and streamed. The rest of the round trip is the 0.5B's above: the
/// constrained choices (`required`, named, `parallel_tool_calls`) run the same grammar and
/// parser whatever the model, and given the call's result the 1.5B calls the tool again (0
/// answers in 16 samples at temperature 0.7, the same on llama-server with the same GGUF;
/// docs/tool-calling.md), which would test the model, not the server.
#[test]
fn qwen_15b_tool_calls() {
    let server = TestServer::start_model(
        common::qwen_15b_path(),
        common::small_setup(),
        common::config(),
    );
    run_script(
        "tool_round_trip.py",
        "openai",
        &[
            "--base-url",
            &server.url("/v1"),
            "--model",
            common::MODEL,
            "--checks",
            "auto_call_streams_as_tool_calls",
        ],
    );
}
