//! `pagoda bench`: a load generator that measures any OpenAI-compatible server the way users
//! feel it: TTFT, TPOT, ITL and end-to-end percentiles, throughput and goodput under SLOs, with
//! realistic arrivals, several workloads, sweeps and A/B comparison of two servers in one run.
//!
//! Layout: `arrival` (when), `workload` + `dataset` + `tokens` + `words` (what), `client` (one
//! timed streaming request), `runner` (the loops), `sweep` (`--sweep`: the highest rate that
//! meets the SLO), `metrics` (statistics), `report` + `chart` + `sweep_chart` (output), `args`
//! (the command line). Depends on the protocol types and `pagoda-capacity` (the SLO rule and
//! rate search it shares with `pagoda plan`), never on server internals.
#![deny(missing_docs)]

pub mod args;
pub use pagoda_capacity::arrival;
pub mod chart;
pub mod client;
pub mod dataset;
pub mod input;
pub mod metrics;
pub mod report;
pub mod runner;
pub mod speculation;
pub mod sweep;
pub mod sweep_chart;
pub mod sweep_result;
pub mod tokens;
mod words;
pub mod workload;

use anyhow::{Context, bail};
use pagoda_protocol::ModelList;

pub use args::BenchArgs;
pub use client::{Api, RequestRecord, SamplingSettings, Target};
pub use metrics::{LatencyStats, Slo, Summary};
pub use runner::{BenchConfig, BenchError, BenchReport, Comparison, Load, PointReport, run_bench};
pub use workload::{LengthDist, WorkloadKind, WorkloadSpec};

/// The first model id a server lists at `/v1/models`.
pub async fn first_model(
    http: &reqwest::Client,
    base_url: &str,
    api_key: Option<&str>,
) -> anyhow::Result<String> {
    let url = format!("{}/v1/models", base_url.trim_end_matches('/'));
    let mut request = http.get(&url);
    if let Some(key) = api_key {
        request = request.bearer_auth(key);
    }
    let response = request
        .send()
        .await
        .with_context(|| format!("cannot reach {url}"))?;
    if !response.status().is_success() {
        bail!("{url} answered {}; pass --model", response.status());
    }
    let list: ModelList = response
        .json()
        .await
        .with_context(|| format!("{url} did not return a model list"))?;
    match list.data.into_iter().next() {
        Some(card) => Ok(card.id),
        None => bail!("{url} lists no models; pass --model"),
    }
}

/// Resolve the arguments, run the benchmark, print the report and write the requested files.
pub async fn run_async(args: BenchArgs) -> anyhow::Result<BenchReport> {
    let http = runner::http_client()?;
    let mut urls = vec![args.base_url.clone()];
    urls.extend(args.compare.clone());
    let mut models = Vec::with_capacity(urls.len());
    for url in &urls {
        models.push(match &args.model {
            Some(m) => m.clone(),
            None => first_model(&http, url, args.api_key.as_deref()).await?,
        });
    }
    let config = args.to_config(&models).map_err(anyhow::Error::msg)?;
    let sweep = config.loads.len() > 1 || args.sweep;
    let report = if args.sweep {
        let start = args.sweep_start().map_err(anyhow::Error::msg)?;
        sweep::run_sweep(config, start, args.sweep_precision, args.sweep_max_probes).await?
    } else {
        run_bench(config).await?
    };
    println!("{}", report::render(&report));
    if let Some(s) = &report.sweep {
        println!("{}", sweep::render(s));
    }
    if let Some(path) = &args.output {
        report::write_json(&report, path)?;
        eprintln!("wrote {}", path.display());
    }
    let chart_path = args.chart.clone().or_else(|| {
        sweep
            .then(|| args.output.as_ref().map(|p| p.with_extension("svg")))
            .flatten()
    });
    if let Some(path) = chart_path {
        let svg = if report.sweep.is_some() {
            sweep_chart::sweep_svg(&report)?
        } else {
            chart::sweep_svg(&report)?
        };
        std::fs::write(&path, svg).with_context(|| format!("cannot write {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(report)
}

/// Entry point for `pagoda bench`: runs on its own multi-threaded tokio runtime.
pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run_async(args)).map(|_| ())
}
