//! Split models across processes (`--distributed-executor-backend mpi` under Open MPI's
//! `mpirun`), on a tiny random llama (4 heads, 2 KV heads, 2 layers, Q8_0): two ranks as
//! processes give the bits two ranks as threads give (the same all-reduce order), for tensor
//! parallelism and for a pipeline, a wrong setup is a one-line
//! error, and a rank killed mid-request ends the whole job instead of leaving it hanging.
//! Needs `mpirun` (scripts/test.sh installs Debian's openmpi-bin).
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use pagoda_testkit::tiny_model::TinyModel;
use serde_json::{Value, json};

fn model() -> PathBuf {
    let p = std::env::temp_dir().join(format!("pagoda-mpi-{}.gguf", std::process::id()));
    if !p.is_file() {
        // Q8_0: o_proj and ffn_down split by input columns in whole blocks of 32.
        let m = TinyModel {
            matrix_type: Some(pagoda_gguf::GgmlType::Q8_0),
            ..TinyModel::llama()
        };
        std::fs::write(&p, m.to_bytes()).unwrap();
    }
    p
}

/// `mpirun -np N` as a test may run it: as root in a container, more ranks than cores, no
/// single-copy shared memory (it needs ptrace rights containers lack).
fn mpirun(np: usize) -> Command {
    let mut c = Command::new("mpirun");
    c.args(["-np", &np.to_string(), "--oversubscribe"])
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
        .env("PAGODA_NO_PACK_CACHE", "1");
    c
}

fn pagoda() -> &'static str {
    env!("CARGO_BIN_EXE_pagoda")
}

/// Runs `cmd`, killed after `limit`: its output, or a failure naming the hang.
fn run(mut cmd: Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot start it (is Open MPI's mpirun installed? scripts/test.sh installs it)");
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("{cmd:?} hung for {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

/// `pagoda generate` over a model split by `split` (`--tensor-parallel-size 2` or
/// `--pipeline-parallel-size 2`).
fn generate_args(split: &str) -> Vec<String> {
    let m = model();
    [
        "generate",
        "--model",
        m.to_str().unwrap(),
        "--prompt",
        "the quick brown fox",
        "--max-tokens",
        "24",
        "--temperature",
        "0",
        "--ignore-eos",
        split,
        "2",
        "--format",
        "json",
        "--top-logprobs",
        "3",
    ]
    .map(String::from)
    .to_vec()
}

fn json_of(out: &Output) -> Value {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.lines().last().unwrap()).unwrap()
}

/// Two ranks as MPI processes against two as threads of one process: the same tokens and
/// top logprobs to the bit.
fn processes_match_threads(split: &str, extra: &[&str]) -> Value {
    let mut threads = Command::new(pagoda());
    threads
        .args(generate_args(split))
        .args(extra)
        .env("PAGODA_NO_PACK_CACHE", "1");
    let threads = json_of(&run(threads, Duration::from_secs(60)));
    let mut mpi = mpirun(2);
    mpi.arg(pagoda())
        .args(generate_args(split))
        .args(extra)
        .args(["--distributed-executor-backend", "mpi"]);
    let mpi = json_of(&run(mpi, Duration::from_secs(120)));
    assert_eq!(mpi["token_ids"].as_array().unwrap().len(), 24);
    for key in ["token_ids", "top_logprobs", "text"] {
        assert_eq!(mpi[key], threads[key], "{split}: {key}");
    }
    mpi
}

#[test]
fn two_mpi_ranks_give_the_bits_of_two_thread_ranks() {
    processes_match_threads("--tensor-parallel-size", &[]);
}

/// A LoRA adapter on every projection: rank 0 sends its weights to rank 1 with the first step,
/// and each rank adds its part of it, as thread ranks do.
#[test]
fn two_mpi_ranks_apply_a_lora_adapter_as_thread_ranks_do() {
    use pagoda_testkit::lora_adapter::{ALL_STEMS, RandomLora, gguf_adapter, projection_shapes};
    let path = std::env::temp_dir().join(format!("pagoda-mpi-lora-{}.gguf", std::process::id()));
    let r = RandomLora::new(4, &ALL_STEMS, 11);
    let t = r.tensors(2, &projection_shapes(256, 256, 128, 512));
    gguf_adapter("llama", r.alpha, &t, pagoda_gguf::GgmlType::F32)
        .write_to(&path)
        .unwrap();
    let adapted = processes_match_threads(
        "--tensor-parallel-size",
        &["--lora", path.to_str().unwrap()],
    );
    let base = processes_match_threads("--tensor-parallel-size", &[]);
    assert_ne!(
        adapted["top_logprobs"], base["top_logprobs"],
        "the adapter changed nothing"
    );
}

/// Two pipeline stages of one layer each, handing the residual stream over MPI.
#[test]
fn two_mpi_stages_give_the_bits_of_two_thread_stages() {
    processes_match_threads("--pipeline-parallel-size", &[]);
}

#[test]
fn wrong_mpi_setups_are_one_line_errors() {
    let m = model();
    let m = m.to_str().unwrap();
    let base = [
        "generate",
        "--model",
        m,
        "--prompt",
        "hi",
        "--max-tokens",
        "2",
    ];
    let failed = |out: Output, wanted: &str| {
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "succeeded: {err}");
        assert!(err.contains(wanted), "{wanted:?} not in: {err}");
        assert!(!err.contains("panicked"), "{err}");
    };
    // Not started by mpirun.
    let mut c = Command::new(pagoda());
    c.args(base).args([
        "--tensor-parallel-size",
        "2",
        "--distributed-executor-backend",
        "mpi",
    ]);
    failed(run(c, Duration::from_secs(30)), "not started by mpirun");
    // Two processes for four ranks.
    let mut c = mpirun(2);
    c.arg(pagoda()).args(base).args([
        "--tensor-parallel-size",
        "4",
        "--distributed-executor-backend",
        "mpi",
    ]);
    failed(run(c, Duration::from_secs(60)), "mpirun started 2");
    // MPI without tensor parallelism.
    let mut c = Command::new(pagoda());
    c.args(base).args(["--distributed-executor-backend", "mpi"]);
    failed(
        run(c, Duration::from_secs(30)),
        "--tensor-parallel-size N or --pipeline-parallel-size N",
    );
}

/// `mpirun`'s rank-`rank` child.
fn rank_pid(mpirun: &Child, rank: usize) -> Option<u32> {
    let children =
        std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", mpirun.id())).ok()?;
    children.split_whitespace().find_map(|pid| {
        let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
        let wanted = format!("OMPI_COMM_WORLD_RANK={rank}");
        env.split(|&b| b == 0)
            .any(|v| v == wanted.as_bytes())
            .then(|| pid.parse().ok())
            .flatten()
    })
}

#[tokio::test]
async fn a_rank_killed_mid_request_ends_the_job_without_a_hang() {
    let port = pagoda_testkit::free_port();
    let m = model();
    let mut job = mpirun(2)
        .arg(pagoda())
        .args(["serve", "--port", &port.to_string(), "--model"])
        .arg(&m)
        .args([
            "--tensor-parallel-size",
            "2",
            "--distributed-executor-backend",
            "mpi",
        ])
        .args(["--kv-cache-memory", "16MiB"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("cannot start mpirun (scripts/test.sh installs Open MPI)");
    let c = reqwest::Client::builder().no_proxy().build().unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !c
        .get(format!("{base}/ready"))
        .send()
        .await
        .is_ok_and(|r| r.status().is_success())
    {
        assert!(Instant::now() < deadline, "the MPI job never became ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let models: Value = c
        .get(format!("{base}/v1/models"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(models["data"][0]["parallel"]["backend"], "mpi", "{models}");
    let r = c
        .post(format!("{base}/v1/completions"))
        .json(
            &json!({"model": models["data"][0]["id"], "prompt": "count", "max_tokens": 100000,
                      "ignore_eos": true, "stream": true}),
        )
        .send()
        .await
        .unwrap();
    let mut body = r.bytes_stream();
    use futures_util::StreamExt;
    body.next().await.unwrap().unwrap();
    let rank1 = rank_pid(&job, 1).expect("rank 1's process");
    Command::new("kill")
        .args(["-KILL", &rank1.to_string()])
        .status()
        .unwrap();
    // The stream ends (an error or a cut connection), and so does the job.
    let ended = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(Ok(_)) = body.next().await {}
    })
    .await;
    assert!(ended.is_ok(), "the stream hung after rank 1 died");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = job.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = job.kill();
            panic!("mpirun kept running after rank 1 died");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(!status.success(), "a killed rank should fail the job");
}
