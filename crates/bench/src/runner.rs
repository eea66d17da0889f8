//! Drives a run: builds the workload, sends it against each target under each load point (open
//! loop at a rate, or closed loop at a concurrency), alternating targets for `--compare`, and
//! collects records into a [`BenchReport`].
//!
//! Bounds: every point sends at most `num_requests` requests and issues none after `duration`;
//! each request is cut off by `timeout`. So every run stops by itself.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::arrival::Arrival;
use crate::client::{
    Api, RequestError, RequestRecord, SamplingSettings, Target, request_body, send_streaming,
};
use crate::metrics::{Slo, Summary};
use crate::speculation::{self, SpecSummary};
use crate::tokens::{CountMethod, TokenCounter};
use crate::workload::{self, WorkItem, WorkloadError, WorkloadSpec};
use pagoda_capacity::ARRIVAL_SEED_SALT;

/// How load is applied at one point of a run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum Load {
    /// Open loop: requests arrive at `rate` per second (infinite: all at once).
    Rate {
        /// Mean requests per second; `f64::INFINITY` sends everything at time 0.
        #[serde(serialize_with = "ser_rate", deserialize_with = "de_rate")]
        rate: f64,
        /// Gamma shape of the gaps (1 = Poisson).
        burstiness: f64,
        /// At most this many requests in flight; later arrivals wait.
        max_concurrency: Option<usize>,
    },
    /// Closed loop: `concurrency` clients, each sending its next request when the last ends.
    Concurrency {
        /// Number of clients.
        concurrency: usize,
    },
}

fn ser_rate<S: serde::Serializer>(rate: &f64, s: S) -> Result<S::Ok, S::Error> {
    if rate.is_finite() {
        s.serialize_f64(*rate)
    } else {
        s.serialize_str("inf")
    }
}

fn de_rate<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    match serde_json::Value::deserialize(d)? {
        serde_json::Value::Number(n) => Ok(n.as_f64().unwrap_or(f64::INFINITY)),
        _ => Ok(f64::INFINITY),
    }
}

impl Load {
    /// Short label for tables and charts (`rate=4/s`, `c=16`).
    pub fn label(&self) -> String {
        match *self {
            Load::Rate {
                rate,
                max_concurrency,
                ..
            } => {
                let r = if rate.is_finite() {
                    // Bisected rates print without float noise (0.165, not 0.16499999999999998).
                    format!("rate={}/s", (rate * 1e4).round() / 1e4)
                } else {
                    "rate=inf".to_owned()
                };
                match max_concurrency {
                    Some(c) => format!("{r} max_c={c}"),
                    None => r,
                }
            }
            Load::Concurrency { concurrency } => format!("c={concurrency}"),
        }
    }
}

/// A complete, resolved run configuration. Build it directly in tests, or from
/// [`crate::BenchArgs`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchConfig {
    /// The server(s): one, or two with `--compare`.
    pub targets: Vec<Target>,
    /// Completions or chat.
    pub api: Api,
    /// What to send.
    pub workload: WorkloadSpec,
    /// Load points (more than one is a sweep).
    pub loads: Vec<Load>,
    /// Requests per point (and per target and round).
    pub num_requests: usize,
    /// Stop issuing requests after this long, per point.
    pub duration: Option<Duration>,
    /// Unrecorded requests sent to each target before the first point.
    pub warmup: usize,
    /// `ignore_eos`, temperature.
    pub sampling: SamplingSettings,
    /// Goodput targets.
    pub slo: Slo,
    /// Seed of the arrival times when it is not the workload's (`--sweep` keeps one arrival
    /// pattern, the one `pagoda plan` simulates, while each probe gets fresh prompts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arrival_seed: Option<u64>,
    /// Per-request limit.
    pub timeout: Duration,
    /// With two targets: how many A/B alternations per point, each with fresh prompts.
    pub rounds: usize,
    /// Ask the server's `/tokenize` to build exact prompt lengths (else approximate).
    pub use_tokenize: bool,
    /// Show a progress bar on stderr.
    pub progress: bool,
}

/// Results of one load point against one target (records of all rounds).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PointReport {
    /// The load applied.
    pub load: Load,
    /// Base URL of the target.
    pub target: String,
    /// Statistics.
    pub summary: Summary,
    /// Speculative decoding over the point, from the server's metrics (when it speculates).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speculation: Option<SpecSummary>,
    /// Every measured request.
    pub records: Vec<RequestRecord>,
}

/// Ratios second target / first target at one load point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// The load applied.
    pub load: Load,
    /// Output tokens/s ratio (> 1: the second target is faster).
    pub output_tokens_per_s: f64,
    /// Request throughput ratio.
    pub request_throughput: f64,
    /// Goodput ratio.
    pub goodput: f64,
    /// TTFT p50 ratio (< 1: the second target is faster).
    pub ttft_p50: f64,
    /// TTFT p99 ratio.
    pub ttft_p99: f64,
    /// TPOT p50 ratio.
    pub tpot_p50: f64,
    /// TPOT p99 ratio.
    pub tpot_p99: f64,
    /// End-to-end p50 ratio.
    pub e2e_p50: f64,
}

impl Comparison {
    fn of(load: Load, a: &Summary, b: &Summary) -> Self {
        let r = |x: f64, y: f64| if x > 0.0 { y / x } else { f64::NAN };
        Self {
            load,
            output_tokens_per_s: r(a.output_tokens_per_s, b.output_tokens_per_s),
            request_throughput: r(a.request_throughput, b.request_throughput),
            goodput: r(a.goodput.requests_per_s, b.goodput.requests_per_s),
            ttft_p50: r(a.ttft_ms.p50, b.ttft_ms.p50),
            ttft_p99: r(a.ttft_ms.p99, b.ttft_ms.p99),
            tpot_p50: r(a.tpot_ms.p50, b.tpot_ms.p50),
            tpot_p99: r(a.tpot_ms.p99, b.tpot_ms.p99),
            e2e_p50: r(a.e2e_ms.p50, b.e2e_ms.p50),
        }
    }
}

/// Everything a run produced; this is what `--output` writes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchReport {
    /// The configuration.
    pub settings: BenchConfig,
    /// How prompt lengths were built.
    pub prompt_length_method: CountMethod,
    /// One per load point and target, in point order, targets in `settings.targets` order.
    pub points: Vec<PointReport>,
    /// With two targets: one per load point.
    pub comparisons: Vec<Comparison>,
    /// With `--sweep`: the highest rate that met the SLO.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep: Option<crate::sweep_result::SweepResult>,
}

/// Errors that stop a run before any measurement.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The configuration cannot run.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The workload could not be built.
    #[error(transparent)]
    Workload(#[from] WorkloadError),
    /// The HTTP client could not be created.
    #[error("cannot create the HTTP client: {0}")]
    Http(#[from] reqwest::Error),
}

/// A new HTTP client tuned for load generation: keep every connection, no Nagle delay.
pub fn http_client() -> Result<reqwest::Client, reqwest::Error> {
    reqwest::Client::builder()
        .pool_max_idle_per_host(usize::MAX)
        .tcp_nodelay(true)
        .build()
}

/// Run the whole benchmark described by `config`.
pub async fn run_bench(config: BenchConfig) -> Result<BenchReport, BenchError> {
    if config.targets.is_empty() || config.targets.len() > 2 {
        return Err(BenchError::Config(format!(
            "need one or two targets, got {}",
            config.targets.len()
        )));
    }
    if config.loads.is_empty() {
        return Err(BenchError::Config("no load point".into()));
    }
    if config.num_requests == 0 {
        return Err(BenchError::Config(
            "--num-requests must be at least 1".into(),
        ));
    }
    let http = http_client()?;
    let counter = if config.use_tokenize {
        TokenCounter::probe(http.clone(), config.targets[0].clone()).await
    } else {
        TokenCounter::approximate(http.clone(), config.targets[0].clone())
    };

    if config.warmup > 0 {
        let spec = WorkloadSpec {
            seed: config.workload.seed ^ 0x5741_524D,
            ..config.workload.clone()
        };
        let items = workload::build(&spec, config.warmup, &counter).await?;
        let load = Load::Concurrency {
            concurrency: config.warmup.min(8),
        };
        for target in &config.targets {
            run_point(&http, &config, target, items.clone(), load, false).await;
        }
    }

    let rounds = if config.targets.len() == 2 {
        config.rounds.max(1)
    } else {
        1
    };
    let mut points = Vec::new();
    let mut comparisons = Vec::new();
    for (p, load) in config.loads.iter().enumerate() {
        let mut per_target: Vec<(Vec<RequestRecord>, f64, usize)> =
            vec![(Vec::new(), 0.0, 0); config.targets.len()];
        let spec_before: Vec<_> = scrape_speculation(&http, &config.targets).await;
        for round in 0..rounds {
            // Fresh prompts per point and round: a repeated prompt would hit the prefix cache
            // (a shared-prefix workload keeps its system prompts: `prefix_seed`).
            let seed = config.workload.seed.wrapping_add((p * 1000 + round) as u64);
            let spec = WorkloadSpec {
                seed,
                ..config.workload.clone()
            };
            let items = workload::build(&spec, config.num_requests, &counter).await?;
            // Alternate who goes first, so neither target always runs on a warmer machine.
            let mut order: Vec<usize> = (0..config.targets.len()).collect();
            if round % 2 == 1 {
                order.reverse();
            }
            for t in order {
                let run = run_point(
                    &http,
                    &config,
                    &config.targets[t],
                    items.clone(),
                    *load,
                    config.progress,
                )
                .await;
                let acc = &mut per_target[t];
                acc.0.extend(run.records);
                acc.1 += run.duration_s;
                acc.2 = acc.2.max(run.max_in_flight);
            }
        }
        let spec_after: Vec<_> = scrape_speculation(&http, &config.targets).await;
        let first = points.len();
        for (t, (records, duration_s, max_in_flight)) in per_target.into_iter().enumerate() {
            let summary = Summary::from_records(&records, duration_s, config.slo, max_in_flight);
            let speculation = match (spec_before[t], spec_after[t]) {
                (Some(a), Some(b)) => speculation::between(a, b),
                _ => None,
            };
            points.push(PointReport {
                load: *load,
                target: config.targets[t].base_url.clone(),
                summary,
                speculation,
                records,
            });
        }
        if config.targets.len() == 2 {
            comparisons.push(Comparison::of(
                *load,
                &points[first].summary,
                &points[first + 1].summary,
            ));
        }
    }
    Ok(BenchReport {
        settings: config,
        prompt_length_method: counter.method,
        points,
        comparisons,
        sweep: None,
    })
}

/// Records of one pass of a workload against one target.
/// Each target's speculation counters now (one scrape each, in order).
async fn scrape_speculation(
    http: &reqwest::Client,
    targets: &[Target],
) -> Vec<Option<speculation::SpecCounters>> {
    let mut out = Vec::with_capacity(targets.len());
    for t in targets {
        out.push(speculation::scrape(http, t).await);
    }
    out
}

struct PointRun {
    records: Vec<RequestRecord>,
    duration_s: f64,
    max_in_flight: usize,
}

/// State shared by the tasks of one pass.
struct Shared {
    http: reqwest::Client,
    target: Target,
    api: Api,
    sampling: SamplingSettings,
    timeout: Duration,
    items: Vec<WorkItem>,
    /// Records carry conversation and turn numbers.
    multi_turn: bool,
    /// Global index of each item's first turn.
    first_index: Vec<usize>,
    epoch: Instant,
    deadline: Option<Instant>,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    cap: Option<Semaphore>,
    bar: ProgressBar,
}

impl Shared {
    /// Send the turns of item `i` in order; `scheduled_s` is when its first turn was due.
    async fn run_item(&self, i: usize, scheduled_s: f64) -> Vec<RequestRecord> {
        let item = &self.items[i];
        let mut answers: Vec<String> = Vec::with_capacity(item.turns.len());
        let mut records = Vec::with_capacity(item.turns.len());
        for (k, turn) in item.turns.iter().enumerate() {
            if k > 0 && self.deadline.is_some_and(|d| Instant::now() >= d) {
                break;
            }
            let multi = self.multi_turn;
            let record = RequestRecord {
                index: self.first_index[i] + k,
                conversation: multi.then_some(i),
                turn: multi.then_some(k),
                scheduled_s: if k == 0 {
                    scheduled_s
                } else {
                    (Instant::now() - self.epoch).as_secs_f64()
                },
                expected_input_tokens: item.expected_input_tokens(k),
                requested_output_tokens: turn.output_tokens,
                ..RequestRecord::default()
            };
            let input = item.input(k, &answers);
            let body = match request_body(
                self.api,
                &self.target.model,
                &input,
                turn.output_tokens,
                self.sampling,
            ) {
                Ok(b) => b,
                Err(e) => {
                    // Unreachable in practice (plain structs of strings and numbers); recorded
                    // rather than panicking.
                    let message = format!("cannot serialize the request: {e}");
                    records.push(RequestRecord {
                        error: Some(RequestError {
                            status: None,
                            message,
                        }),
                        ..record
                    });
                    break;
                }
            };
            // A closed semaphore never happens (it is never closed); treat it as "no cap".
            let _permit = match &self.cap {
                Some(sem) => sem.acquire().await.ok(),
                None => None,
            };
            let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            self.max_in_flight.fetch_max(now, Ordering::SeqCst);
            let outcome = send_streaming(
                &self.http,
                &self.target,
                self.api,
                &body,
                record,
                self.epoch,
                self.timeout,
            )
            .await;
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            self.bar.inc(1);
            let failed = !outcome.record.success;
            records.push(outcome.record);
            answers.push(outcome.text);
            if failed {
                break; // later turns would build on a missing answer
            }
        }
        records
    }
}

async fn run_point(
    http: &reqwest::Client,
    config: &BenchConfig,
    target: &Target,
    items: Vec<WorkItem>,
    load: Load,
    progress: bool,
) -> PointRun {
    let total: usize = items.iter().map(|i| i.turns.len()).sum();
    let mut first_index = Vec::with_capacity(items.len());
    let mut acc = 0;
    for item in &items {
        first_index.push(acc);
        acc += item.turns.len();
    }
    let bar = if progress {
        let bar = ProgressBar::new(total as u64);
        let style = ProgressStyle::with_template(
            "{prefix} [{elapsed_precise}] {bar:40} {pos}/{len} ({per_sec})",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        bar.set_prefix(format!("{} {}", target.base_url, load.label()));
        bar
    } else {
        ProgressBar::hidden()
    };
    let epoch = Instant::now();
    let cap = match load {
        Load::Rate {
            max_concurrency: Some(c),
            ..
        } => Some(Semaphore::new(c.max(1))),
        _ => None,
    };
    let shared = Arc::new(Shared {
        http: http.clone(),
        target: target.clone(),
        api: config.api,
        sampling: config.sampling,
        timeout: config.timeout,
        items,
        multi_turn: config.workload.kind == crate::workload::WorkloadKind::MultiTurn,
        first_index,
        epoch,
        deadline: config.duration.map(|d| epoch + d),
        in_flight: AtomicUsize::new(0),
        max_in_flight: AtomicUsize::new(0),
        cap,
        bar,
    });

    let mut tasks = JoinSet::new();
    match load {
        Load::Rate {
            rate, burstiness, ..
        } => {
            let mut rng = ChaCha8Rng::seed_from_u64(
                config.arrival_seed.unwrap_or(config.workload.seed) ^ ARRIVAL_SEED_SALT,
            );
            let schedule = Arrival::new(rate, burstiness).schedule(
                &mut rng,
                shared.items.len(),
                config.duration,
            );
            for (i, at) in schedule.into_iter().enumerate() {
                let shared = Arc::clone(&shared);
                tasks.spawn(async move {
                    tokio::time::sleep_until((epoch + Duration::from_secs_f64(at)).into()).await;
                    shared.run_item(i, at).await
                });
            }
        }
        Load::Concurrency { concurrency } => {
            let next = Arc::new(AtomicUsize::new(0));
            for _ in 0..concurrency.max(1) {
                let shared = Arc::clone(&shared);
                let next = Arc::clone(&next);
                tasks.spawn(async move {
                    let mut records = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::SeqCst);
                        if i >= shared.items.len()
                            || shared.deadline.is_some_and(|d| Instant::now() >= d)
                        {
                            break;
                        }
                        let at = (Instant::now() - shared.epoch).as_secs_f64();
                        records.extend(shared.run_item(i, at).await);
                    }
                    records
                });
            }
        }
    }
    let mut records = Vec::with_capacity(total);
    while let Some(joined) = tasks.join_next().await {
        // A task only ends abnormally if it panicked (a bug); its requests are then missing.
        if let Ok(mut r) = joined {
            records.append(&mut r);
        }
    }
    shared.bar.finish_and_clear();
    records.sort_by_key(|r| r.index);
    let end = records
        .iter()
        .map(|r| r.sent_s + r.e2e_ms / 1e3)
        .fold(0.0, f64::max);
    PointRun {
        records,
        duration_s: end,
        max_in_flight: shared.max_in_flight.load(Ordering::SeqCst),
    }
}
