//! `pagoda generate` end to end: the real binary on the real models, against llama.cpp's golden
//! chat outputs, plus its output formats and its errors for bad input.

use std::path::PathBuf;
use std::process::{Command, Output};

fn model_dir() -> PathBuf {
    match std::env::var_os("PAGODA_MODEL_DIR") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/pagoda/models"),
    }
}

fn model(file: &str) -> PathBuf {
    let p = model_dir().join(file);
    assert!(
        p.exists(),
        "{} is missing: run scripts/fetch-models.sh",
        p.display()
    );
    p
}

fn golden(file: &str) -> serde_json::Value {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/golden")
        .join(file);
    // A checkout outside /work (e.g. a fresh clone in /tmp) still finds the shared goldens.
    let p = if p.exists() {
        p
    } else {
        PathBuf::from("/work/shared/golden").join(file)
    };
    let body = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&body).expect("golden JSON")
}

fn pagoda(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pagoda"))
        .args(args)
        .output()
        .expect("run pagoda")
}

fn json_lines(out: &Output) -> Vec<serde_json::Value> {
    assert!(
        out.status.success(),
        "pagoda failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone())
        .expect("utf-8 stdout")
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect()
}

/// Largest gap between our top probability and the reference's token's probability under our
/// model at which a different greedy choice counts as a near-tie. llama.cpp's own settings (f16 KV,
/// flash attention, thread count) move these small quantized models' probabilities by up to ~0.05
/// (see docs/correctness.md), so a choice closer than this is numerical noise, not a bug.
const NEAR_TIE: f64 = 0.1;

/// For every golden prompt: the chat-templated prompt's token ids equal llama.cpp's, and greedy
/// chat generation reproduces llama.cpp's text, up to a near-tie: at the first token where the two
/// differ, the reference's token must be one of our top candidates, within `NEAR_TIE` of our
/// choice. Every divergence is printed.
fn check_chat_golden(model_file: &str, golden_file: &str) {
    let g = golden(golden_file);
    let prompts = g["prompts"].as_array().expect("prompts");
    let path = model(model_file);
    let file = pagoda_gguf::GgufFile::open(&path).expect("open model");
    let tokenizer = pagoda_frontend::Tokenizer::from_gguf(&file).expect("tokenizer");
    let dir = tempdir();
    let prompts_file = dir.join("prompts.jsonl");
    let body: String = prompts
        .iter()
        .map(|p| format!("{}\n", serde_json::json!({"prompt": p["prompt"]})))
        .collect();
    std::fs::write(&prompts_file, body).expect("write prompts");
    let out = pagoda(&[
        "generate",
        "--model",
        path.to_str().expect("path"),
        "--prompts-file",
        prompts_file.to_str().expect("path"),
        "--chat",
        "--max-tokens",
        "48",
        "--top-logprobs",
        "5",
        "--format",
        "json",
    ]);
    let results = json_lines(&out);
    assert_eq!(results.len(), prompts.len());
    let mut exact = 0;
    for (p, r) in prompts.iter().zip(&results) {
        let id = p["id"].as_str().unwrap_or("?");
        assert_eq!(
            r["prompt_token_ids"], p["chat_templated_tokens_add_special_true"],
            "{model_file} {id}: chat prompt token ids differ from llama.cpp's"
        );
        let want_text = p["chat_completion_text"]
            .as_str()
            .expect("chat_completion_text");
        let got_text = r["text"].as_str().expect("text");
        if want_text == got_text {
            exact += 1;
            continue;
        }
        // The reference only has text: re-tokenize it to find the first differing token.
        let want = tokenizer.encode(want_text, false, false);
        let got: Vec<u32> = r["token_ids"]
            .as_array()
            .expect("token_ids")
            .iter()
            .map(|v| v.as_u64().expect("id") as u32)
            .collect();
        let i = want.iter().zip(&got).take_while(|(a, b)| a == b).count();
        if i == want.len().min(got.len()) {
            // Same tokens up to where one stops: the reference stopped at EOS earlier, or the
            // text differs only in how an end token renders.
            eprintln!("{model_file} {id}: same tokens up to {i}, texts differ in length only");
            continue;
        }
        let top = r["top_logprobs"][i]
            .as_array()
            .expect("top_logprobs at divergence");
        let prob = |tok: u32| {
            top.iter()
                .find(|t| t["token_id"].as_u64() == Some(u64::from(tok)))
                .and_then(|t| t["logprob"].as_f64())
                .map(f64::exp)
        };
        let ours = prob(got[i]).expect("our choice is our top candidate");
        let theirs = prob(want[i]);
        eprintln!(
            "{model_file} {id}: diverges at generated token {i}: ours {} (p={ours:.3}), llama.cpp {} (p={})",
            got[i],
            want[i],
            theirs.map_or("not in our top 5".to_string(), |p| format!("{p:.3}")),
        );
        // Outside our top 5, its probability is below our 5th one's: 0 bounds it from below.
        let theirs = theirs.unwrap_or(0.0);
        assert!(
            ours - theirs <= NEAR_TIE,
            "{model_file} {id}: not a near-tie at token {i}: ours p={ours:.3}, llama.cpp's p={theirs:.3}"
        );
    }
    eprintln!(
        "{model_file}: {exact}/{} chat completions identical to llama.cpp",
        prompts.len()
    );
}

#[test]
fn smollm2_chat_matches_llama_cpp() {
    check_chat_golden("SmolLM2-135M-Instruct.Q4_1.gguf", "smollm2-135m-q4_1.json");
}

#[test]
fn gemma3_chat_matches_llama_cpp() {
    check_chat_golden("gemma-3-270m-q4_k_m.gguf", "gemma3-270m-q4_k_m.json");
}

#[test]
fn json_output_has_every_field() {
    let smollm2 = model("SmolLM2-135M-Instruct.Q4_1.gguf");
    let out = pagoda(&[
        "generate",
        "--model",
        smollm2.to_str().expect("a UTF-8 model path"),
        "--prompt",
        "The capital of France is",
        "--max-tokens",
        "5",
        "--top-logprobs",
        "3",
        "--format",
        "json",
    ]);
    let results = json_lines(&out);
    assert_eq!(results.len(), 1);
    let r = &results[0];
    assert_eq!(r["prompt"], "The capital of France is");
    // Golden: SmolLM2 tokenizes this as [504, 3575, 282, 4649, 314] and continues with " Paris".
    assert_eq!(
        r["prompt_token_ids"],
        serde_json::json!([504, 3575, 282, 4649, 314])
    );
    let ids = r["token_ids"].as_array().expect("token_ids");
    assert_eq!(ids.len(), 5);
    assert_eq!(ids[0], 7042);
    assert!(r["text"].as_str().expect("text").starts_with(" Paris"));
    assert_eq!(r["finish_reason"], "length");
    let top = r["top_logprobs"].as_array().expect("top_logprobs");
    assert_eq!(top.len(), 5);
    for pos in top {
        let alts = pos.as_array().expect("alternatives");
        assert_eq!(alts.len(), 3);
        let lps: Vec<f64> = alts
            .iter()
            .map(|a| a["logprob"].as_f64().expect("logprob"))
            .collect();
        assert!(
            lps.windows(2).all(|w| w[0] >= w[1]),
            "alternatives sorted best first: {lps:?}"
        );
        assert!(lps.iter().all(|&l| l <= 0.0));
    }
    // The greedy choice is the best alternative.
    assert_eq!(top[0][0]["token_id"], 7042);
}

#[test]
fn text_output_streams_and_reports_speed() {
    let out = pagoda(&[
        "generate",
        "--prompt",
        "The capital of France is",
        "--max-tokens",
        "8",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).expect("utf-8");
    assert!(stdout.starts_with(" Paris"), "{stdout:?}");
    let stderr = String::from_utf8(out.stderr).expect("utf-8");
    assert!(stderr.contains("tok/s"), "{stderr}");
}

fn assert_one_line_error(out: &Output, needle: &str) {
    assert!(!out.status.success(), "expected failure");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line of error, got {stderr:?}");
    assert!(
        lines[0].contains(needle),
        "{:?} should mention {needle:?}",
        lines[0]
    );
}

#[test]
fn bad_input_gives_one_line_errors() {
    assert_one_line_error(
        &pagoda(&[
            "generate",
            "--model",
            "/nonexistent/model.gguf",
            "--prompt",
            "x",
        ]),
        "/nonexistent/model.gguf",
    );
    assert_one_line_error(
        &pagoda(&["generate", "--prompt", "x", "--temperature=-1"]),
        "temperature",
    );
    assert_one_line_error(
        &pagoda(&["generate", "--prompt", "x", "--max-tokens", "lots"]),
        "max-tokens",
    );
    assert_one_line_error(&pagoda(&["generate"]), "prompt");
    let dir = tempdir();
    let bad = dir.join("bad.jsonl");
    std::fs::write(&bad, "{\"prompt\": \"ok\"}\n{not json\n").expect("write");
    assert_one_line_error(
        &pagoda(&["generate", "--prompts-file", bad.to_str().expect("path")]),
        "line 2",
    );
    let not_gguf = dir.join("not.gguf");
    std::fs::write(&not_gguf, b"this is not a gguf file at all").expect("write");
    assert_one_line_error(
        &pagoda(&[
            "generate",
            "--model",
            not_gguf.to_str().expect("path"),
            "--prompt",
            "x",
        ]),
        "not.gguf",
    );
    assert_one_line_error(
        &pagoda(&["generate", "--prompt", "x", "--max-tokens", "100000"]),
        "context",
    );
    // A model file cut short (a download that died): an error naming it, not a crash.
    let whole = std::fs::read(model("SmolLM2-135M-Instruct.Q4_1.gguf")).expect("read model");
    let cut = dir.join("cut.gguf");
    std::fs::write(&cut, &whole[..whole.len() / 2]).expect("write");
    let cut = cut.to_str().expect("path");
    assert_one_line_error(
        &pagoda(&["generate", "--model", cut, "--prompt", "x"]),
        "cut.gguf",
    );
    // A decode replica open to the network without the shared secret refuses to start.
    assert_one_line_error(
        &pagoda(&["serve", "--model", cut, "--kv-role", "decode"]),
        "--kv-transfer-secret-file",
    );
}

fn tempdir() -> PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let d = std::env::temp_dir().join(format!(
        "pagoda-cli-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&d).expect("tempdir");
    d
}
