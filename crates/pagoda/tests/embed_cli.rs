//! `pagoda embed` on all-MiniLM-L6-v2 (fetched by `scripts/fetch-models.sh minilm`): one
//! vector a line as JSONL, the same values as a NumPy .npy file, and an empty line refused by
//! the server's rule with its file and line.

use std::path::PathBuf;
use std::process::{Command, Output};

fn minilm() -> PathBuf {
    let base = match std::env::var_os("PAGODA_MODEL_DIR") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/pagoda/models"),
    };
    let dir = base.join("all-MiniLM-L6-v2");
    if !dir.join("model.safetensors").is_file() {
        let script =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/fetch-models.sh");
        let status = Command::new("bash")
            .arg(script)
            .arg("minilm")
            .status()
            .expect("run fetch-models.sh");
        assert!(status.success(), "scripts/fetch-models.sh minilm failed");
    }
    dir
}

fn embed(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pagoda"))
        .arg("embed")
        .args(args)
        .output()
        .expect("run pagoda")
}

#[test]
fn embed_writes_jsonl_and_npy() {
    let model = minilm();
    let model = model.to_str().expect("path");
    let dir = std::env::temp_dir().join(format!("pagoda-embed-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tempdir");
    let texts = dir.join("texts.txt");
    std::fs::write(
        &texts,
        "hello world\nA man is playing a guitar.\nLe chat dort.\n",
    )
    .expect("write");
    let texts = texts.to_str().expect("path");

    let out = embed(&["--model", model, texts]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<Vec<f32>> = String::from_utf8(out.stdout)
        .expect("utf-8")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON array a line"))
        .collect();
    assert_eq!(rows.len(), 3);
    assert!(rows.iter().all(|r| r.len() == 384));
    let norm: f32 = rows[1].iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-5, "norm {norm}");

    let npy = dir.join("out.npy");
    let out = embed(&[
        "--model",
        model,
        "--format",
        "npy",
        "-o",
        npy.to_str().expect("path"),
        texts,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bytes = std::fs::read(&npy).expect("read npy");
    assert_eq!(&bytes[..8], b"\x93NUMPY\x01\x00");
    let len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
    let header = std::str::from_utf8(&bytes[10..10 + len]).expect("header");
    assert!(header.contains("'shape': (3, 384)"), "{header}");
    let values: Vec<f32> = bytes[10 + len..]
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    assert_eq!(values, rows.concat(), "the .npy holds the JSONL's values");

    let bad = dir.join("bad.txt");
    std::fs::write(&bad, "fine\n\nfine\n").expect("write");
    let out = embed(&["--model", model, bad.to_str().expect("path")]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("bad.txt line 2") && stderr.contains("empty"),
        "{stderr}"
    );
}
