//! `pagoda chat` through a pseudo-terminal (tests/chat_pty.py, Python's stdlib `pty`): against
//! a fake server that checks the history of every turn, /system, /reset and Ctrl-C exactly, and
//! once against the real SmolLM2 model loaded by the chat itself.

use std::path::PathBuf;
use std::process::Command;

fn drive(args: &[&str]) {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/chat_pty.py");
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let out = Command::new(&python)
        .arg(&script)
        .arg(env!("CARGO_BIN_EXE_pagoda"))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {python}: {e}"));
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("ok"),
        "chat_pty.py {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn two_turns_system_reset_and_ctrl_c_against_a_server() {
    drive(&["fake"]);
}

#[test]
fn chats_with_a_local_model() {
    let dir = match std::env::var_os("PAGODA_MODEL_DIR") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/pagoda/models"),
    };
    let model = dir.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        model.exists(),
        "{} is missing: run scripts/fetch-models.sh",
        model.display()
    );
    drive(&["local", model.to_str().expect("a UTF-8 path")]);
}
