//! `pagoda perplexity`: a model's perplexity over a text file in llama-perplexity's windows,
//! and with `--kl-divergence-base FILE` the base run's full-vocabulary log-probabilities saved,
//! then (`--kl-divergence`) another model, quant or KV type compared against them.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, bail};
use clap::Args;
use pagoda_model::eval::{
    ChunkPlan, Evaluator, KldStats, KldSummary, LogprobReader, LogprobWriter, NllStats, compare_row,
};

use crate::model_path;

#[derive(Args)]
pub struct PerplexityArgs {
    /// GGUF model file, a Hugging Face checkpoint directory, or a fetched catalog name
    /// [default: qwen2.5-coder:0.5b].
    #[arg(long, env = "PAGODA_MODEL")]
    model: Option<PathBuf>,
    /// The text to score (UTF-8). With --kl-divergence the tokens come from the base file.
    #[arg(short = 'f', long, required_unless_present = "kl_divergence")]
    file: Option<PathBuf>,
    /// Tokens per window; the second half of each window is scored [default: 512, or the base
    /// run's with --kl-divergence].
    #[arg(short = 'c', long)]
    ctx: Option<usize>,
    /// Score at most this many windows [default: all that fit].
    #[arg(long)]
    chunks: Option<usize>,
    /// Without --kl-divergence: save this run's log-probabilities to FILE. With it: compare
    /// against the run saved there.
    #[arg(long)]
    kl_divergence_base: Option<PathBuf>,
    /// Compare against --kl-divergence-base (same text, same tokenizer) instead of saving it.
    #[arg(long, requires = "kl_divergence_base")]
    kl_divergence: bool,
    /// Print the final figures as one JSON object on stdout.
    #[arg(long)]
    json: bool,
    /// Compute threads [default: all cores].
    #[arg(long)]
    threads: Option<usize>,
    /// What a Hugging Face checkpoint's matrices are quantized to at load.
    #[arg(long, default_value = "q8_0", value_parser = ["q8_0", "q4_k", "q4_0", "none"])]
    quantization: String,
    /// Element type of the KV cache the windows are scored with (llama-perplexity's `-ctk` /
    /// `-ctv`): with --kl-divergence against an f16 base run, what int8 KV costs.
    #[arg(long, default_value = "f16", value_parser = ["f32", "f16", "int8"])]
    kv_cache_dtype: String,
}

pub fn run(args: PerplexityArgs) -> anyhow::Result<()> {
    crate::engine_args::set_threads(args.threads)?;
    let quantization = pagoda_hf::Quantization::from_name(&args.quantization)
        .with_context(|| format!("--quantization {}", args.quantization))?;
    let path = model_path::resolve(args.model.clone(), false)?;
    let kv_cache_dtype: pagoda_model::KvCacheDtype =
        args.kv_cache_dtype.parse().context("--kv-cache-dtype")?;
    let mut opened = pagoda_server::open_model(&path, quantization)?;
    opened.model.set_kv_cache_dtype(kv_cache_dtype);
    let bos = opened
        .tokenizer
        .add_bos()
        .then(|| opened.tokenizer.bos_id())
        .flatten();

    // The comparing run scores exactly the base run's tokens; a text given too must tokenize
    // to the same ones (else a different tokenizer or text would be compared silently).
    let mut base = match (&args.kl_divergence_base, args.kl_divergence) {
        (Some(p), true) => Some(LogprobReader::open(p, opened.model.config().vocab_size)?),
        _ => None,
    };
    let tokens = match (&args.file, &base) {
        (Some(f), _) => {
            let text = std::fs::read_to_string(f)
                .with_context(|| format!("cannot read {}", f.display()))?;
            opened.tokenizer.encode(&text, true, false)
        }
        (None, Some(b)) => b.tokens.clone(),
        (None, None) => bail!("--file is required"),
    };
    let ctx = match &base {
        Some(b) => {
            b.check_tokens(&tokens)?;
            if let Some(c) = args.ctx.filter(|&c| c != b.plan.ctx) {
                bail!("--ctx {c} differs from the base run's {}", b.plan.ctx);
            }
            b.plan.ctx
        }
        None => args.ctx.unwrap_or(512),
    };
    let mut evaluator = Evaluator::new(opened.model, ctx)?;
    let plan = match &base {
        Some(b) => b.plan,
        None => ChunkPlan::new(tokens.len(), ctx, args.chunks)?,
    };
    let mut save = match (&args.kl_divergence_base, args.kl_divergence) {
        (Some(p), false) => Some(LogprobWriter::create(
            p,
            evaluator.vocab_size(),
            &plan,
            &tokens,
        )?),
        _ => None,
    };
    eprintln!(
        "perplexity: {} tokens, {} windows of {} ({} scored each){}",
        tokens.len(),
        plan.num_chunks,
        plan.ctx,
        plan.scored_per_chunk(),
        match (&save, &base) {
            (Some(_), _) => ", saving the base log-probabilities",
            (_, Some(_)) => ", comparing against the base log-probabilities",
            _ => "",
        }
    );

    let started = Instant::now();
    let mut nll = NllStats::default();
    let mut kld = KldStats::default();
    let mut base_row = Vec::new();
    let mut failure = None;
    let mut stderr = std::io::stderr();
    for c in 0..plan.num_chunks {
        let chunk = &tokens[c * plan.ctx..(c + 1) * plan.ctx];
        evaluator.score_chunk(chunk, bos, &plan, |next, lp| {
            if failure.is_some() {
                return;
            }
            let cur = f64::from(lp[next as usize]);
            nll.add(-cur);
            if let Some(w) = save.as_mut()
                && let Err(e) = w.write_row(lp)
            {
                failure = Some(e);
            }
            if let Some(b) = base.as_mut() {
                if let Err(e) = b.read_row(&mut base_row) {
                    failure = Some(e);
                    return;
                }
                let row = compare_row(&base_row, lp, next);
                kld.add(row, f64::from(base_row[next as usize]), cur);
            }
        })?;
        if let Some(e) = failure.take() {
            return Err(e.into());
        }
        let _ = write!(stderr, "[{}]{:.4},", c + 1, nll.perplexity());
        let _ = stderr.flush();
    }
    let _ = writeln!(stderr);
    if let Some(w) = save {
        w.finish()?;
    }
    let seconds = started.elapsed().as_secs_f64();
    let scored = nll.count();
    println!(
        "Final estimate: PPL = {:.4} +/- {:.5}",
        nll.perplexity(),
        nll.perplexity_error()
    );
    println!(
        "{scored} tokens scored in {seconds:.1} s ({:.1} tokens/s evaluated)",
        (plan.num_chunks * plan.ctx) as f64 / seconds
    );
    let summary = base.is_some().then(|| kld.summary());
    if let Some(s) = &summary {
        print_kld(s);
    }
    if args.json {
        let mut j = serde_json::json!({
            "ppl": nll.perplexity(),
            "ppl_error": nll.perplexity_error(),
            "ctx": plan.ctx,
            "chunks": plan.num_chunks,
            "tokens_scored": scored,
            "seconds": seconds,
        });
        if let Some(s) = &summary {
            j["kld"] = serde_json::json!({
                "ppl_base": s.ppl_base,
                "ln_ppl_ratio": s.ln_ppl_ratio,
                "mean": s.mean_kld,
                "mean_error": s.mean_kld_error,
                "max": s.max_kld,
                "p99_9": s.p99_9_kld,
                "p99": s.p99_kld,
                "p95": s.p95_kld,
                "median": s.median_kld,
                "same_top": s.same_top,
                "rms_dp": s.rms_dp,
            });
        }
        println!("{j}");
    }
    Ok(())
}

fn print_kld(s: &KldSummary) {
    println!("Mean PPL(Q)               : {:.6}", s.ppl_cur);
    println!("Mean PPL(base)            : {:.6}", s.ppl_base);
    println!("Mean ln(PPL(Q)/PPL(base)) : {:.6}", s.ln_ppl_ratio);
    println!(
        "Mean KLD                  : {:.6} +/- {:.6}",
        s.mean_kld, s.mean_kld_error
    );
    println!("Maximum KLD               : {:.6}", s.max_kld);
    println!("99.9%   KLD               : {:.6}", s.p99_9_kld);
    println!("99.0%   KLD               : {:.6}", s.p99_kld);
    println!("95.0%   KLD               : {:.6}", s.p95_kld);
    println!("Median  KLD               : {:.6}", s.median_kld);
    println!("RMS Δp                    : {:.3} %", 100.0 * s.rms_dp);
    println!("Same top p                : {:.3} %", 100.0 * s.same_top);
}
