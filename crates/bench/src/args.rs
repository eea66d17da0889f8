//! The command line of `pagoda bench` (a `clap::Args` the binary embeds) and its resolution
//! into a [`BenchConfig`].

use std::path::PathBuf;
use std::time::Duration;

use crate::client::{Api, SamplingSettings, Target};
use crate::metrics::Slo;
use crate::runner::{BenchConfig, Load};
use crate::workload::{LengthDist, WorkloadKind, WorkloadSpec};

/// Load-test an OpenAI-compatible server (pagoda, vLLM, llama.cpp's llama-server, ...).
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// Server base URL (without /v1).
    #[arg(
        long,
        env = "PAGODA_BENCH_BASE_URL",
        default_value = "http://127.0.0.1:8000"
    )]
    pub base_url: String,
    /// A second server to run the same workload against, alternately; prints ratios.
    #[arg(long, value_name = "URL2")]
    pub compare: Option<String>,
    /// With --compare: A/B alternations per load point, each with fresh prompts.
    #[arg(long, default_value_t = 1)]
    pub rounds: usize,
    /// Bearer token sent to the server(s).
    #[arg(long, env = "OPENAI_API_KEY")]
    pub api_key: Option<String>,
    /// Model id; default: the first entry of the server's /v1/models.
    #[arg(long)]
    pub model: Option<String>,
    /// Endpoint: /v1/completions or /v1/chat/completions.
    #[arg(long, value_enum, default_value = "completions")]
    pub api: Api,

    /// What to send.
    #[arg(long, value_enum, default_value = "random")]
    pub workload: WorkloadKind,
    /// Prompt length in tokens: 128 (fixed), 64..256 (uniform) or 128+-32 (normal).
    #[arg(long, default_value = "128")]
    pub input_len: LengthDist,
    /// max_tokens per request, same syntax; default 128 (file: the dataset's answer lengths).
    #[arg(long)]
    pub output_len: Option<LengthDist>,
    /// shared-prefix: number of groups (distinct system prompts).
    #[arg(long, default_value_t = 4)]
    pub num_groups: usize,
    /// shared-prefix: system prompt length in tokens.
    #[arg(long, default_value_t = 512)]
    pub prefix_len: u32,
    /// shared-prefix: the same system prompts at every load point, round and sweep probe, each
    /// group's computed by a warm-up request before the first measured one, so every measured
    /// request finds its prompt cached (a deployment's steady state; `pagoda plan
    /// --shared-prefix-cached` predicts it). Otherwise each point starts with new prompts.
    #[arg(long)]
    pub prefix_warmup: bool,
    /// multi-turn: turns per conversation.
    #[arg(long, default_value_t = 4)]
    pub num_turns: usize,
    /// file: JSON lines of prompts, or a ShareGPT JSON file.
    #[arg(long)]
    pub dataset_path: Option<PathBuf>,
    /// Seed for prompts, lengths and arrival times.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Build prompt lengths by word count instead of asking the server's /tokenize.
    #[arg(long)]
    pub no_tokenize: bool,

    /// Open loop: requests per second, or a comma list for a sweep; `inf` sends all at once.
    #[arg(long, value_delimiter = ',', conflicts_with = "concurrency")]
    pub request_rate: Vec<String>,
    /// Gamma shape of arrival gaps: 1 = Poisson, < 1 burstier, > 1 more regular.
    #[arg(long, default_value_t = 1.0)]
    pub burstiness: f64,
    /// Closed loop: number of concurrent clients, or a comma list for a sweep.
    #[arg(long, value_delimiter = ',')]
    pub concurrency: Vec<usize>,
    /// Open loop: cap on requests in flight.
    #[arg(long)]
    pub max_concurrency: Option<usize>,
    /// Requests per load point.
    #[arg(long)]
    pub num_requests: Option<usize>,
    /// Stop issuing requests after this long per point (e.g. 60s, 2m).
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Requests sent first to each server and not counted.
    #[arg(long, default_value_t = 0)]
    pub warmup: usize,
    /// Per-request time limit (e.g. 600s).
    #[arg(long, value_parser = parse_duration, default_value = "600s")]
    pub timeout: Duration,

    /// Send ignore_eos so every request generates exactly max_tokens (vLLM extension).
    #[arg(long)]
    pub ignore_eos: bool,
    /// Sampling temperature (default: the server's).
    #[arg(long)]
    pub temperature: Option<f32>,

    /// Goodput targets, e.g. `ttft=1s,tpot=100ms,e2e=30s` (any subset; a bare number is
    /// milliseconds). A point meets the SLO when at least 90% of its requests meet every target.
    #[arg(long, value_parser = parse_slo)]
    pub slo: Option<Slo>,
    /// Goodput: TTFT limit in milliseconds (same as --slo ttft=N).
    #[arg(long)]
    pub slo_ttft: Option<f64>,
    /// Goodput: TPOT limit in milliseconds (same as --slo tpot=N).
    #[arg(long)]
    pub slo_tpot: Option<f64>,
    /// Find the highest request rate that meets --slo: a doubling ladder from the first
    /// --request-rate (default 1/s), then bisection; each probe is a run of --num-requests.
    #[arg(long, conflicts_with_all = ["concurrency", "compare"])]
    pub sweep: bool,
    /// --sweep stops when the passing and failing rates are within this fraction.
    #[arg(long, default_value_t = 0.1)]
    pub sweep_precision: f64,
    /// --sweep runs at most this many probes.
    #[arg(long, default_value_t = 12)]
    pub sweep_max_probes: usize,

    /// Write settings, summaries and per-request records as JSON.
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// Write the sweep chart (SVG); default with a sweep and --output: the output path with .svg.
    #[arg(long)]
    pub chart: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    pub no_progress: bool,
}

/// Requests per point when neither --num-requests nor --duration bounds the run.
pub const DEFAULT_NUM_REQUESTS: usize = 200;
/// Upper bound on prepared requests when only --duration is given.
pub const DURATION_ONLY_MAX_REQUESTS: usize = 5_000;

/// Parse `500ms`, `60s`, `2m`, `1h` or a plain number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let value: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a duration like 60s, 2m, 500ms"))?;
    let seconds = match unit {
        "ms" => value / 1e3,
        "s" => value,
        "m" | "min" => value * 60.0,
        "h" => value * 3600.0,
        _ => return Err(format!("unknown unit `{unit}` in `{s}` (ms, s, m, h)")),
    };
    if !(seconds.is_finite() && seconds > 0.0) {
        return Err(format!("`{s}` must be a positive duration"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

fn parse_slo(s: &str) -> Result<Slo, String> {
    Slo::parse(s).map_err(|e| e.to_string())
}

fn parse_rate(s: &str) -> Result<f64, String> {
    let s = s.trim();
    if s.eq_ignore_ascii_case("inf") {
        return Ok(f64::INFINITY);
    }
    match s.parse::<f64>() {
        Ok(r) if r > 0.0 => Ok(r),
        _ => Err(format!(
            "--request-rate `{s}` must be a positive number or `inf`"
        )),
    }
}

impl BenchArgs {
    /// The load points: rates, concurrencies, or by default everything at once.
    pub fn loads(&self) -> Result<Vec<Load>, String> {
        if !self.concurrency.is_empty() {
            if self.concurrency.contains(&0) {
                return Err("--concurrency must be at least 1".into());
            }
            return Ok(self
                .concurrency
                .iter()
                .map(|&concurrency| Load::Concurrency { concurrency })
                .collect());
        }
        if !(self.burstiness.is_finite() && self.burstiness > 0.0) {
            return Err("--burstiness must be positive".into());
        }
        let rates = if self.request_rate.is_empty() {
            vec![f64::INFINITY]
        } else {
            self.request_rate
                .iter()
                .map(|r| parse_rate(r))
                .collect::<Result<_, _>>()?
        };
        Ok(rates
            .into_iter()
            .map(|rate| Load::Rate {
                rate,
                burstiness: self.burstiness,
                max_concurrency: self.max_concurrency,
            })
            .collect())
    }

    /// `--slo`, with `--slo-ttft` / `--slo-tpot` filling in (or overriding) their targets.
    pub fn resolved_slo(&self) -> Slo {
        let mut slo = self.slo.unwrap_or_default();
        slo.ttft_ms = self.slo_ttft.or(slo.ttft_ms);
        slo.tpot_ms = self.slo_tpot.or(slo.tpot_ms);
        slo
    }

    /// `--sweep`'s start rate and its checks: it needs a TTFT or end-to-end target (without one
    /// requests just queue and every rate meets the SLO).
    pub fn sweep_start(&self) -> Result<f64, String> {
        let slo = self.resolved_slo();
        if slo.ttft_ms.is_none() && slo.e2e_ms.is_none() {
            return Err(
                "--sweep needs --slo with a ttft or e2e target (e.g. --slo ttft=1s,tpot=100ms)"
                    .into(),
            );
        }
        if !(self.sweep_precision > 0.0 && self.sweep_precision < 1.0) {
            return Err("--sweep-precision must be between 0 and 1".into());
        }
        match self.request_rate.first() {
            None => Ok(1.0),
            Some(r) => match parse_rate(r)? {
                r if r.is_finite() => Ok(r),
                _ => Err("--sweep needs a finite --request-rate to start from".into()),
            },
        }
    }

    /// Resolve into a runnable config; `models` are the model ids of the targets (looked up by
    /// the caller when --model is absent).
    pub fn to_config(&self, models: &[String]) -> Result<BenchConfig, String> {
        let mut urls = vec![self.base_url.clone()];
        urls.extend(self.compare.clone());
        if models.len() != urls.len() {
            return Err("one model id per target is needed".into());
        }
        let targets = urls
            .into_iter()
            .zip(models)
            .map(|(base_url, model)| Target {
                base_url,
                api_key: self.api_key.clone(),
                model: model.clone(),
            })
            .collect();
        if self.workload == WorkloadKind::File && self.dataset_path.is_none() {
            return Err("--workload file needs --dataset-path".into());
        }
        if self.prefix_warmup && self.workload != WorkloadKind::SharedPrefix {
            return Err("--prefix-warmup needs --workload shared-prefix".into());
        }
        let num_requests = match (self.num_requests, self.duration) {
            (Some(n), _) => n,
            (None, Some(_)) => DURATION_ONLY_MAX_REQUESTS,
            (None, None) => DEFAULT_NUM_REQUESTS,
        };
        if num_requests == 0 {
            return Err("--num-requests must be at least 1".into());
        }
        Ok(BenchConfig {
            targets,
            api: self.api,
            workload: WorkloadSpec {
                kind: self.workload,
                input_len: self.input_len,
                output_len: self.output_len,
                num_groups: self.num_groups,
                prefix_len: self.prefix_len,
                num_turns: self.num_turns,
                dataset_path: self.dataset_path.clone(),
                seed: self.seed,
                prefix_seed: self.prefix_warmup.then_some(self.seed),
            },
            loads: self.loads()?,
            num_requests,
            duration: self.duration,
            // One warm-up request per group computes its system prompt (round-robin).
            warmup: if self.prefix_warmup {
                self.warmup.max(self.num_groups)
            } else {
                self.warmup
            },
            sampling: SamplingSettings {
                ignore_eos: self.ignore_eos,
                temperature: self.temperature,
            },
            slo: self.resolved_slo(),
            arrival_seed: None,
            timeout: self.timeout,
            rounds: self.rounds.max(1),
            use_tokenize: !self.no_tokenize,
            progress: !self.no_progress,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        bench: BenchArgs,
    }

    fn parse(args: &[&str]) -> Result<BenchArgs, clap::Error> {
        Cli::try_parse_from(std::iter::once("bench").chain(args.iter().copied())).map(|c| c.bench)
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("60s"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert!(
            parse_duration("0s").is_err()
                && parse_duration("5d").is_err()
                && parse_duration("x").is_err()
        );
    }

    #[test]
    fn prefix_warmup_pins_the_prompts_and_warms_every_group() {
        let a = parse(&[
            "--workload",
            "shared-prefix",
            "--num-groups",
            "3",
            "--seed",
            "7",
            "--prefix-warmup",
        ])
        .unwrap();
        let c = a.to_config(&["m".into()]).unwrap();
        assert_eq!((c.workload.prefix_seed, c.warmup), (Some(7), 3));
        let plain = parse(&["--workload", "shared-prefix", "--warmup", "1"]).unwrap();
        let c = plain.to_config(&["m".into()]).unwrap();
        assert_eq!((c.workload.prefix_seed, c.warmup), (None, 1));
        let random = parse(&["--prefix-warmup"]).unwrap();
        let err = random.to_config(&["m".into()]).err().unwrap();
        assert!(err.contains("shared-prefix"), "{err}");
    }

    #[test]
    fn sweep_and_defaults() {
        let a = parse(&[
            "--request-rate",
            "1,2,inf",
            "--burstiness",
            "0.5",
            "--max-concurrency",
            "8",
        ])
        .unwrap();
        let loads = a.loads().unwrap();
        assert_eq!(loads.len(), 3);
        assert_eq!(
            loads[0],
            Load::Rate {
                rate: 1.0,
                burstiness: 0.5,
                max_concurrency: Some(8)
            }
        );
        assert!(matches!(loads[2], Load::Rate { rate, .. } if rate.is_infinite()));
        let c = a.to_config(&["m".into()]).unwrap();
        assert_eq!(c.num_requests, DEFAULT_NUM_REQUESTS);
        assert_eq!(c.workload.input_len, LengthDist::Fixed { n: 128 });

        let b = parse(&[
            "--concurrency",
            "1,16,32",
            "--compare",
            "http://b:1",
            "--duration",
            "30s",
            "--ignore-eos",
        ])
        .unwrap();
        let c = b.to_config(&["m".into(), "n".into()]).unwrap();
        assert_eq!(
            c.loads,
            vec![
                Load::Concurrency { concurrency: 1 },
                Load::Concurrency { concurrency: 16 },
                Load::Concurrency { concurrency: 32 }
            ]
        );
        assert_eq!(c.targets[1].model, "n");
        assert_eq!(c.num_requests, DURATION_ONLY_MAX_REQUESTS);
        assert!(c.sampling.ignore_eos);

        assert!(parse(&["--concurrency", "4", "--request-rate", "2"]).is_err());
        let s = parse(&["--slo", "ttft=2s,tpot=50ms", "--slo-tpot", "80", "--sweep"]).unwrap();
        let slo = s.to_config(&["m".into()]).unwrap().slo;
        assert_eq!((slo.ttft_ms, slo.tpot_ms), (Some(2000.0), Some(80.0)));
        assert_eq!(s.sweep_start(), Ok(1.0));
        assert!(
            parse(&["--sweep", "--slo", "tpot=1s"])
                .unwrap()
                .sweep_start()
                .is_err()
        );
        assert!(parse(&["--slo", "ttft=fast"]).is_err());
        assert!(parse(&["--sweep", "--concurrency", "2"]).is_err());
        assert!(parse(&["--request-rate=-1"]).unwrap().loads().is_err());
        assert!(parse(&["--input-len", "0"]).is_err());
        assert!(
            parse(&["--workload", "file"])
                .unwrap()
                .to_config(&["m".into()])
                .is_err()
        );
    }
}
