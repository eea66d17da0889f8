//! `pagoda profile`'s served decode steps: the model behind a real server on a loopback port in
//! this process, N streamed requests sent at once, the median gap between their tokens taken as
//! one decode step of N sequences. The planner scales the forwards by how much slower these ran
//! (pagoda-capacity's `step_cost.rs`): the engine loop, scheduler, sampler and HTTP around them.

use std::path::Path;

use anyhow::{Context, bail};
use clap::Parser;
use pagoda_bench::{BenchArgs, run_bench};
use pagoda_capacity::DecodePoint;
use pagoda_model::{EngineSetup, KvCacheDtype};

use crate::local_server;

/// Requests sent at once: one decode step of each many sequences.
const SEQS: &[usize] = &[1, 4, 16];
/// Prompt tokens of each request: all prompts of the largest batch fit one step, so every
/// later step is a pure decode.
const PROMPT_TOKENS: usize = 128;
/// Tokens each request generates: 31 gaps a request.
const OUTPUT_TOKENS: usize = 32;

/// `pagoda bench`'s arguments, parsed as its command line is, so the runs go through its
/// one path (prompt building, streaming, statistics).
#[derive(Parser)]
struct Bench {
    #[command(flatten)]
    args: BenchArgs,
}

/// Time decode steps of each of [`SEQS`] sequences through a server of `path`.
pub fn measure(
    path: &Path,
    kv_dtype: KvCacheDtype,
    quantization: pagoda_hf::Quantization,
) -> anyhow::Result<Vec<DecodePoint>> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("pagoda-http")
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        let setup = EngineSetup {
            kv_cache_dtype: kv_dtype,
            ..EngineSetup::default()
        };
        let config = pagoda_server::ServerConfig {
            served_model_name: "profiled".to_owned(),
            quantization,
            ..pagoda_server::ServerConfig::default()
        };
        let server = local_server::start(path.to_owned(), setup, config).await?;
        let points = time_steps(&server.base_url).await;
        server.stop().await?;
        points
    })
}

async fn time_steps(base_url: &str) -> anyhow::Result<Vec<DecodePoint>> {
    let mut points = Vec::with_capacity(SEQS.len());
    for &seqs in SEQS {
        let n = seqs.to_string();
        let argv = [
            "bench",
            "--base-url",
            base_url,
            "--input-len",
            &PROMPT_TOKENS.to_string(),
            "--output-len",
            &OUTPUT_TOKENS.to_string(),
            "--ignore-eos",
            "--num-requests",
            &n,
            "--concurrency",
            &n,
            "--seed",
            &n,
            "--no-progress",
            // The first request after loading page-faults and grows the buffers: unrecorded.
            "--warmup",
            "1",
        ];
        let bench = Bench::try_parse_from(argv).context("served-step benchmark arguments")?;
        let config = bench
            .args
            .to_config(&["profiled".to_owned()])
            .map_err(anyhow::Error::msg)?;
        let report = run_bench(config).await.context("served-step benchmark")?;
        let Some(point) = report.points.first() else {
            bail!("the served-step benchmark measured nothing");
        };
        let summary = &point.summary;
        if summary.failed > 0 {
            bail!(
                "{} of {seqs} requests to the profiled server failed",
                summary.failed
            );
        }
        if summary.itl_ms.count == 0 {
            bail!("the profiled server streamed no token gaps for {seqs} requests");
        }
        points.push(DecodePoint {
            seqs,
            // The middle of the decodes: the prompt and half the output before each.
            context: PROMPT_TOKENS + OUTPUT_TOKENS / 2,
            secs: summary.itl_ms.p50 / 1000.0,
        });
    }
    Ok(points)
}
