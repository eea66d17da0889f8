//! `pagoda perplexity` on tiny random models: its perplexity against one computed here from
//! the model's logits over llama-perplexity's windows, a model against itself (no divergence)
//! and against another (a large one), and its errors for bad input.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;

use pagoda_model::{CpuExecutor, ForwardBatch, Logits, Model, SeqChunk};
use pagoda_testkit::tiny_model::TinyModel;
use serde_json::Value;

const CTX: usize = 64;

fn dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("pagoda-ppl-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn write_model(name: &str, m: &TinyModel) -> PathBuf {
    let p = dir().join(name);
    std::fs::write(&p, m.to_bytes()).unwrap();
    p
}

fn text_file() -> PathBuf {
    let p = dir().join("text.txt");
    let text: String = (0..120)
        .map(|i| format!("Sentence {i} says that the quick brown fox jumps. "))
        .collect();
    std::fs::write(&p, text).unwrap();
    p
}

fn pagoda(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pagoda"))
        .arg("perplexity")
        .args(args)
        .env("PAGODA_NO_PACK_CACHE", "1")
        .output()
        .unwrap()
}

fn json_of(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.lines().last().unwrap()).unwrap()
}

/// Perplexity from first principles: the same windows, each run with all its logits, the
/// second half scored with an f64 log-softmax.
fn reference_ppl(model: &Path, text: &Path, chunks: usize) -> f64 {
    let file = Arc::new(pagoda_gguf::GgufFile::open(model).unwrap());
    let tokenizer = pagoda_frontend::Tokenizer::from_gguf(&file).unwrap();
    let tokens = tokenizer.encode(&std::fs::read_to_string(text).unwrap(), true, false);
    let mut exec = CpuExecutor::new(Model::load(file).unwrap(), CTX / 16, 16).unwrap();
    let table: Vec<u32> = (0..(CTX / 16) as u32).collect();
    let vocab = exec.vocab_size();
    let (mut nll, mut n) = (0.0f64, 0usize);
    for c in 0..chunks {
        let mut chunk = tokens[c * CTX..(c + 1) * CTX].to_vec();
        if tokenizer.add_bos() {
            chunk[0] = tokenizer.bos_id().unwrap();
        }
        let batch = ForwardBatch::from_seqs(
            &[SeqChunk {
                tokens: &chunk,
                start: 0,
                block_tables: std::slice::from_ref(&table),
                logits: Logits::All,
            }],
            16,
        );
        let logits = exec.forward(&batch).unwrap().to_vec();
        for j in CTX / 2..CTX - 1 {
            let row = &logits[j * vocab..(j + 1) * vocab];
            let max = row.iter().copied().fold(f32::MIN, f32::max) as f64;
            let z: f64 = row.iter().map(|&v| (v as f64 - max).exp()).sum();
            let next = tokens[c * CTX + j + 1] as usize;
            nll -= row[next] as f64 - max - z.ln();
            n += 1;
        }
    }
    (nll / n as f64).exp()
}

#[test]
fn perplexity_matches_the_reference_and_kld_tells_models_apart() {
    let base = write_model("base.gguf", &TinyModel::llama());
    let other = write_model(
        "other.gguf",
        &TinyModel {
            seed: 99,
            ..TinyModel::llama()
        },
    );
    let text = text_file();
    let logp = dir().join("base.logp");
    let ctx = CTX.to_string();
    let (b, t, l) = (
        base.to_str().unwrap(),
        text.to_str().unwrap(),
        logp.to_str().unwrap(),
    );

    let saved = json_of(&pagoda(&[
        "--model",
        b,
        "-f",
        t,
        "--ctx",
        &ctx,
        "--chunks",
        "3",
        "--json",
        "--kl-divergence-base",
        l,
    ]));
    assert_eq!(saved["chunks"], 3);
    assert_eq!(saved["tokens_scored"], 3 * (CTX / 2 - 1));
    let want = reference_ppl(&base, &text, 3);
    let got = saved["ppl"].as_f64().unwrap();
    assert!((got / want - 1.0).abs() < 1e-4, "{got} vs {want}");

    let same = json_of(&pagoda(&[
        "--model",
        b,
        "--kl-divergence-base",
        l,
        "--kl-divergence",
        "--json",
    ]));
    assert_eq!(same["ppl"], saved["ppl"]);
    assert!(same["kld"]["mean"].as_f64().unwrap() < 1e-6, "{same}");
    assert_eq!(same["kld"]["same_top"], 1.0);

    // The same model with int8 KV: a small divergence, far below another model's.
    let int8 = json_of(&pagoda(&[
        "--model",
        b,
        "--kl-divergence-base",
        l,
        "--kl-divergence",
        "--kv-cache-dtype",
        "int8",
        "--json",
    ]));
    let int8_kld = int8["kld"]["mean"].as_f64().unwrap();
    assert!(int8_kld > 0.0 && int8_kld < 1e-3, "{int8}");

    let o = other.to_str().unwrap();
    let diff = json_of(&pagoda(&[
        "--model",
        o,
        "--kl-divergence-base",
        l,
        "--kl-divergence",
        "--json",
    ]));
    assert!(diff["kld"]["mean"].as_f64().unwrap() > 0.01, "{diff}");
    assert!(diff["kld"]["same_top"].as_f64().unwrap() < 1.0, "{diff}");

    // A truncated base file is refused by name, never read past its end.
    let bytes = std::fs::read(&logp).unwrap();
    std::fs::write(&logp, &bytes[..bytes.len() / 2]).unwrap();
    let out = pagoda(&["--model", b, "--kl-divergence-base", l, "--kl-divergence"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("truncated or corrupt"), "{err}");
}

#[test]
fn bad_input_is_a_clear_error() {
    let base = write_model("errors.gguf", &TinyModel::llama());
    let b = base.to_str().unwrap();
    let short = dir().join("short.txt");
    std::fs::write(&short, "too short").unwrap();
    let s = short.to_str().unwrap();
    for (args, want) in [
        (vec!["--model", b, "-f", s], "fewer than one window"),
        (
            vec!["--model", b, "-f", s, "--ctx", "2"],
            "--ctx must be between",
        ),
        (
            vec!["--model", b, "-f", "/nonexistent.txt"],
            "cannot read /nonexistent.txt",
        ),
        (
            vec!["--model", b, "--kl-divergence"],
            "--kl-divergence-base",
        ),
        (
            vec!["--model", b, "--kl-divergence-base", s, "--kl-divergence"],
            "not a pagoda log-probability file",
        ),
    ] {
        let out = pagoda(&args);
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
    }
}
