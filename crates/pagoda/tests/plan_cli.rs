//! `pagoda plan` on a saved cost profile (no model): the JSON fields scripts rely on, the
//! unattainable-SLO error naming the binding resource, a bad profile named in one line; and
//! `pagoda profile` on a tiny random model, served steps included, feeding a plan.

use std::path::PathBuf;
use std::process::{Command, Output};

fn pagoda(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pagoda"))
        .args(args)
        .output()
        .expect("run pagoda")
}

/// A profile whose every step takes 10 ms (weights streaming, nothing else).
fn flat_profile(dir: &std::path::Path) -> PathBuf {
    let decode: Vec<serde_json::Value> = [1, 64]
        .iter()
        .flat_map(|&seqs| {
            [128, 1024]
                .map(|context| serde_json::json!({"seqs": seqs, "context": context, "secs": 0.01}))
        })
        .collect();
    let profile = serde_json::json!({
        "version": 1,
        "machine": {"cpu": "test", "threads": 2, "simd": "Scalar", "load_average": null},
        "model": {"name": "flat", "file_bytes": 0, "n_layers": 24, "context_length": 32768},
        "kv_cache_dtype": "f16",
        "kv_bytes_per_token": {"f32": 24576, "f16": 12288, "int8": 6528},
        "kv_budget_bytes": 1u64 << 30,
        "block_size": 16,
        "prefill": [{"tokens": 64, "context": 0, "secs": 0.01}, {"tokens": 4096, "context": 0, "secs": 0.01}],
        "decode": decode,
        "sample_secs_per_seq": 0.0,
        "step_overhead_secs": 0.0
    });
    let path = dir.join("flat.json");
    std::fs::write(&path, profile.to_string()).expect("write profile");
    path
}

fn tempdir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("pagoda-plan-cli-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

#[test]
fn plan_json_has_the_fields_scripts_use_and_errors_name_the_resource() {
    let dir = tempdir();
    let profile = flat_profile(&dir);
    let p = profile.to_str().expect("path");
    let common = [
        "plan",
        "--profile",
        p,
        "--prompt-tokens",
        "64",
        "--output-tokens",
        "16",
    ];
    let out = pagoda(
        &[
            &common[..],
            &[
                "--slo",
                "ttft=2s,tpot=120ms",
                "--json",
                "--target-rps",
                "50",
            ],
        ]
        .concat(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert!(v["max_goodput_rps"].as_f64().expect("max_goodput_rps") > 0.0);
    assert!(v["binding_resource"].is_string());
    assert!(v["kv_bytes_needed"].as_u64().expect("kv_bytes_needed") > 0);
    let flags: Vec<&str> = v["recommended_flags"]
        .as_array()
        .expect("recommended_flags")
        .iter()
        .filter_map(|f| f.as_str())
        .collect();
    assert!(flags.contains(&"--max-num-seqs"), "{flags:?}");
    assert!(
        v["plan"]["replicas"]["colocated"]
            .as_u64()
            .expect("replicas")
            >= 1
    );

    // Every step takes 10 ms: no batch decodes within 5 ms a token.
    let out = pagoda(&[&common[..], &["--slo", "ttft=2s,tpot=5ms"]].concat());
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("memory_bandwidth binds") && err.lines().count() == 1,
        "{err}"
    );

    let bad = dir.join("bad.json");
    std::fs::write(&bad, "{}").expect("write");
    let out = pagoda(&[
        "plan",
        "--profile",
        bad.to_str().expect("path"),
        "--prompt-tokens",
        "8",
        "--output-tokens",
        "8",
        "--slo",
        "ttft=1s",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("bad.json") && err.lines().count() == 1,
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// `pagoda profile` of `model` with `extra` flags into `out`: its stderr and the profile.
fn profile(
    model: &std::path::Path,
    out: &std::path::Path,
    extra: &[&str],
) -> (String, serde_json::Value) {
    let run = pagoda(
        &[
            &[
                "profile",
                "--model",
                model.to_str().expect("path"),
                "--threads",
                "1",
                "-o",
                out.to_str().expect("path"),
            ][..],
            extra,
        ]
        .concat(),
    );
    let err = String::from_utf8_lossy(&run.stderr).into_owned();
    assert!(run.status.success(), "{err}");
    let text = std::fs::read_to_string(out).expect("profile written");
    (err, serde_json::from_str(&text).expect("JSON"))
}

/// `pagoda plan --json` on the profile at `path`.
fn plan_of(path: &std::path::Path) -> serde_json::Value {
    let out = pagoda(&[
        "plan",
        "--profile",
        path.to_str().expect("path"),
        "--prompt-tokens",
        "64",
        "--output-tokens",
        "16",
        "--slo",
        "ttft=2s,tpot=200ms",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

fn priced_as_served(plan: &serde_json::Value) -> bool {
    plan["plan"]["reasoning"]
        .as_array()
        .expect("reasoning")
        .iter()
        .any(|l| l.as_str().is_some_and(|l| l.contains("priced as served")))
}

#[test]
fn profile_times_forwards_and_served_steps_and_plans_from_them() {
    let dir = tempdir().join("profile");
    std::fs::create_dir_all(&dir).expect("temp dir");
    let model = dir.join("tiny.gguf");
    let tiny = pagoda_testkit::tiny_model::TinyModel {
        // The profile's longest chunk ends at 2,304 tokens.
        context_length: 4096,
        ..pagoda_testkit::tiny_model::TinyModel::llama()
    };
    std::fs::write(&model, tiny.to_bytes()).expect("write model");

    let served_path = dir.join("served.json");
    let (err, v) = profile(&model, &served_path, &["--rounds", "2"]);
    assert!(err.contains("2 rounds"), "{err}");
    assert_eq!(v["decode"].as_array().expect("decode").len(), 8);
    // One served decode step of 1, 4 and 16 sequences (the real server in the process), each
    // a real (positive) time, and the plan prices its steps by them.
    let served = v["served_decode"].as_array().expect("served_decode");
    let seqs: Vec<u64> = served
        .iter()
        .map(|p| p["seqs"].as_u64().expect("seqs"))
        .collect();
    assert_eq!(seqs, [1, 4, 16]);
    assert!(
        served
            .iter()
            .all(|p| p["secs"].as_f64().is_some_and(|s| s > 0.0 && s < 10.0)),
        "{served:?}"
    );
    let plan = plan_of(&served_path);
    assert!(priced_as_served(&plan), "{plan}");
    assert!(plan["max_goodput_rps"].as_f64().expect("max_goodput_rps") > 0.0);
    let (rate, margin) = (
        plan["plan"]["max_rate_rps"].as_f64().expect("max_rate_rps"),
        plan["plan"]["max_rate_rps_slower_steps"]
            .as_f64()
            .expect("max_rate_rps_slower_steps"),
    );
    assert!(margin > 0.0 && margin <= rate, "{margin} vs {rate}");

    // --no-served: bare forwards, priced as they are.
    let bare_path = dir.join("bare.json");
    let (_, v) = profile(&model, &bare_path, &["--rounds", "1", "--no-served"]);
    assert!(v.get("served_decode").is_none(), "{v}");
    assert!(!priced_as_served(&plan_of(&bare_path)));
    std::fs::remove_dir_all(&dir).ok();
}
