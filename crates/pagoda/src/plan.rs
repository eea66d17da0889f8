//! `pagoda plan`: sizes a deployment before it is bought. From a cost profile (measured here
//! in seconds, or a saved one from `pagoda profile`), a workload and SLOs, it prints the
//! highest goodput one replica serves, the binding resource, the KV memory needed, the
//! recommended `pagoda serve` flags and the replicas for a target rate
//! (pagoda-capacity's `planner.rs` does the work; this file is the command line).

use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Args;
use pagoda_capacity::{CostProfile, Length, PlanOptions, Slo, Workload};

use crate::profile;

#[derive(Args, Clone, Debug)]
pub struct PlanArgs {
    /// Model to profile on this machine (a GGUF file, checkpoint directory or catalog name);
    /// not needed with --profile.
    #[arg(long, required_unless_present = "profile")]
    pub model: Option<PathBuf>,
    /// A saved cost profile (`pagoda profile --output FILE`), e.g. from another machine.
    #[arg(long)]
    pub profile: Option<PathBuf>,
    /// Prompt tokens per request: 512 or a uniform range 256..1024.
    #[arg(long, value_parser = Length::parse)]
    pub prompt_tokens: Length,
    /// Output tokens per request: 128 or a range 64..256.
    #[arg(long, value_parser = Length::parse)]
    pub output_tokens: Length,
    /// Leading prompt tokens every request shares (a system prompt the prefix cache holds).
    #[arg(long, default_value_t = 0)]
    pub shared_prefix_tokens: u32,
    /// The shared prefix is cached before the first request (a steady state; what `pagoda bench
    /// --prefix-warmup` gives a shared-prefix run); otherwise the first request computes it.
    #[arg(long, requires = "shared_prefix_tokens")]
    pub shared_prefix_cached: bool,
    /// Targets: ttft=2s,tpot=120ms[,e2e=30s]; a ttft or e2e target is required.
    #[arg(long, value_parser = parse_slo)]
    pub slo: Slo,
    /// Gamma shape of arrival gaps: 1 = Poisson, < 1 burstier (as `pagoda bench`).
    #[arg(long, default_value_t = 1.0)]
    pub burstiness: f64,
    /// Requests the deployment must serve per second: prints the replicas needed.
    #[arg(long)]
    pub target_rps: Option<f64>,
    /// KV element type the server will use.
    #[arg(long, default_value = "f16", value_parser = ["f32", "f16", "int8"])]
    pub kv_cache_dtype: String,
    /// Memory for the KV cache [default: what `pagoda serve` takes on the profiled machine].
    #[arg(long)]
    pub kv_cache_memory: Option<String>,
    /// Requests per simulated run (as `pagoda bench --num-requests`).
    #[arg(long, default_value_t = 200)]
    pub num_requests: usize,
    /// Seed of the simulated arrivals and lengths (as `pagoda bench --seed`).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Compute threads when profiling [default: all cores].
    #[arg(long)]
    pub threads: Option<usize>,
    /// Print the plan as JSON.
    #[arg(long)]
    pub json: bool,
}

fn parse_slo(s: &str) -> Result<Slo, String> {
    Slo::parse(s).map_err(|e| e.to_string())
}

pub fn run(args: PlanArgs) -> anyhow::Result<()> {
    if !(args.burstiness.is_finite() && args.burstiness > 0.0) {
        bail!("--burstiness must be positive");
    }
    if args.num_requests == 0 {
        bail!("--num-requests must be at least 1");
    }
    if args.target_rps.is_some_and(|r| !(r.is_finite() && r > 0.0)) {
        bail!("--target-rps must be a positive number");
    }
    if args.shared_prefix_tokens >= args.prompt_tokens.lo {
        bail!(
            "--shared-prefix-tokens {} must be shorter than the shortest prompt ({})",
            args.shared_prefix_tokens,
            args.prompt_tokens.lo
        );
    }
    let kv_budget = match &args.kv_cache_memory {
        Some(s) => Some(pagoda_core::config::parse_size(s).context("--kv-cache-memory")?),
        None => None,
    };
    let profile = match (&args.profile, &args.model) {
        (Some(path), _) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            CostProfile::from_json(&text)
                .with_context(|| format!("--profile {}", path.display()))?
        }
        (None, Some(model)) => {
            crate::engine_args::set_threads(args.threads)?;
            let path = crate::model_path::resolve(Some(model.clone()), false)?;
            eprintln!("profiling {} on this machine (seconds)...", path.display());
            profile::measure(
                &path,
                &args.kv_cache_dtype,
                pagoda_hf::Quantization::Q8_0,
                profile::DEFAULT_ROUNDS,
                true,
            )?
        }
        (None, None) => bail!("pass --model or --profile"),
    };
    let workload = Workload {
        prompt_tokens: args.prompt_tokens,
        output_tokens: args.output_tokens,
        shared_prefix_tokens: args.shared_prefix_tokens,
        shared_prefix_cached: args.shared_prefix_cached,
        burstiness: args.burstiness,
    };
    let opts = PlanOptions {
        num_requests: args.num_requests,
        seed: args.seed,
        kv_cache_dtype: match args.kv_cache_dtype.as_str() {
            "f32" => "f32",
            "int8" => "int8",
            _ => "f16",
        },
        kv_budget_bytes: kv_budget,
        target_rps: args.target_rps,
    };
    let plan = pagoda_capacity::plan(&profile, &workload, &args.slo, &opts)?;
    if args.json {
        let value = serde_json::json!({
            "model": profile.model.name,
            "machine": {
                "cpu": profile.machine.cpu,
                "threads": profile.machine.threads,
                "load_average": profile.machine.load_average,
            },
            "workload": workload,
            "slo": args.slo,
            "plan": plan,
            "max_goodput_rps": plan.max_goodput_rps,
            "binding_resource": plan.binding_resource,
            "kv_bytes_needed": plan.kv_bytes_needed,
            "recommended_flags": plan.recommended_flags,
        });
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(());
    }
    println!(
        "{} on {} ({} threads), {} prompt / {} output tokens, {} shared; SLO {}",
        profile.model.name,
        profile.machine.cpu,
        profile.machine.threads,
        fmt_len(workload.prompt_tokens),
        fmt_len(workload.output_tokens),
        workload.shared_prefix_tokens,
        args.slo.describe()
    );
    println!();
    println!(
        "max goodput per replica   {:.3} req/s (at {:.3} req/s offered)",
        plan.max_goodput_rps, plan.max_rate_rps
    );
    println!(
        "with {:.0}% slower steps     {:.3} req/s offered (a margin for a machine whose speed drifts)",
        (pagoda_capacity::plan_types::SLOWER_STEPS - 1.0) * 100.0,
        plan.max_rate_rps_slower_steps
    );
    println!("binding resource          {}", plan.binding_resource);
    println!(
        "KV memory needed          {:.1} MiB at the peak ({:.1} MiB for --max-num-seqs full; {:.1} MiB available)",
        mib(plan.kv_bytes_needed),
        mib(plan.kv_bytes_at_max_num_seqs),
        mib(plan.kv_bytes_available)
    );
    println!(
        "recommended flags         {}",
        plan.recommended_flags.join(" ")
    );
    println!(
        "defaults                  {:.3} req/s",
        plan.defaults.max_rate_rps
    );
    if let Some(r) = &plan.replicas {
        println!(
            "for {} req/s              {} replicas; disaggregated {} prefill + {} decode",
            r.target_rps, r.colocated, r.prefill, r.decode
        );
    }
    println!("\nreasoning:");
    for line in &plan.reasoning {
        println!("  - {line}");
    }
    Ok(())
}

fn fmt_len(l: Length) -> String {
    if l.lo == l.hi {
        l.lo.to_string()
    } else {
        format!("{}..{}", l.lo, l.hi)
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / 1048576.0
}
