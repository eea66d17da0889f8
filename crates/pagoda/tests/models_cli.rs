//! `pagoda list`, `pull`, `rm` and `--model NAME` on a scratch model directory: the catalog's
//! names, one-line errors naming the known models, and removal with the sidecars. Nothing is
//! downloaded.

use std::path::PathBuf;
use std::process::{Command, Output};

fn pagoda(dir: &PathBuf, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pagoda"))
        .args(args)
        .env("PAGODA_MODEL_DIR", dir)
        // Any fallback pack cache of the scratch model stays in the scratch directory.
        .env("XDG_CACHE_HOME", dir.join("cache"))
        .output()
        .expect("run pagoda")
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pagoda-models-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn list_shows_the_catalog_and_what_is_fetched() {
    let dir = scratch("list");
    let smol = dir.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    std::fs::write(&smol, b"not really a model").expect("write");
    let out = pagoda(&dir, &["list"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    for name in [
        "qwen2.5-coder:0.5b",
        "qwen2.5-coder:1.5b",
        "smollm2:135m",
        "gemma3:270m",
        "all-minilm",
        "embeddinggemma",
    ] {
        assert!(stdout.contains(name), "{name} missing from:\n{stdout}");
    }
    let smol_line = stdout
        .lines()
        .find(|l| l.starts_with("smollm2:135m"))
        .expect("a smollm2 line");
    assert!(!smol_line.contains("missing"), "{smol_line}");
    assert!(
        smol_line.contains(&smol.display().to_string()),
        "{smol_line}"
    );
    let qwen_line = stdout
        .lines()
        .find(|l| l.starts_with("qwen2.5-coder:0.5b"))
        .expect("a qwen line");
    assert!(qwen_line.contains("missing"), "{qwen_line}");
    std::fs::remove_dir_all(&dir).expect("clean up");
}

#[test]
fn unknown_and_unfetched_names_fail_in_one_line() {
    let dir = scratch("errors");
    let out = pagoda(&dir, &["pull", "nonsense"]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("unknown model `nonsense`"), "{err}");
    assert!(err.contains("qwen2.5-coder:0.5b"), "{err}");

    let out = pagoda(&dir, &["generate", "--model", "smollm2", "--prompt", "x"]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("run `pagoda pull smollm2:135m`"), "{err}");

    let out = pagoda(&dir, &["rm", "gemma3"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("not fetched"));
    std::fs::remove_dir_all(&dir).expect("clean up");
}

#[test]
fn rm_deletes_the_model_and_its_sidecars() {
    let dir = scratch("rm");
    let file = dir.join("gemma-3-270m-q4_k_m.gguf");
    let sidecars = [
        dir.join("gemma-3-270m-q4_k_m.gguf.sha256"),
        dir.join("gemma-3-270m-q4_k_m.gguf.pagoda-packed"),
    ];
    let other = dir.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    for p in sidecars.iter().chain([&file, &other]) {
        std::fs::write(p, b"x").expect("write");
    }
    let out = pagoda(&dir, &["rm", "gemma3:270m"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!file.exists());
    for p in &sidecars {
        assert!(!p.exists(), "{} is left", p.display());
    }
    assert!(other.exists(), "another model was removed");
    std::fs::remove_dir_all(&dir).expect("clean up");
}
