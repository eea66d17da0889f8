//! `pagoda generate`: runs prompts through the engine (all of a file's prompts as one
//! continuous batch) and prints the results, streamed as text or as one JSON object per prompt,
//! then the aggregate throughput.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use pagoda_core::{PositionLogprobs, SamplingParams};
use pagoda_frontend::SamplingDefaults;
use pagoda_frontend::chat_prompt::{self, PromptOptions};
use pagoda_protocol::{ChatMessage as ProtocolMessage, FinishReason, Role};
use pagoda_server::{
    FieldNames, Generation, LoadOptions, TextOptions, Unchecked, ValidRequest, load_engine,
};

use crate::engine_args::EngineArgs;
use crate::model_path;

#[derive(Args)]
pub struct GenerateArgs {
    /// GGUF model file, a Hugging Face checkpoint directory (config.json, *.safetensors,
    /// tokenizer.json), or a fetched catalog name (`pagoda list`) [default: qwen2.5-coder:0.5b]
    #[arg(long, env = "PAGODA_MODEL")]
    model: Option<PathBuf>,
    /// The prompt text.
    #[arg(
        long,
        conflicts_with = "prompts_file",
        required_unless_present = "prompts_file"
    )]
    prompt: Option<String>,
    /// A file of JSON lines, each an object with a "prompt" string.
    #[arg(long)]
    prompts_file: Option<PathBuf>,
    /// Apply the model's chat template, the prompt being one user message.
    #[arg(long)]
    chat: bool,
    /// A Jinja chat template file to use instead of the model's own (implies --chat).
    #[arg(long)]
    chat_template: Option<PathBuf>,
    /// Most tokens to generate per prompt.
    #[arg(long, default_value_t = 128)]
    max_tokens: u32,
    /// Sampling temperature; 0 is greedy [default: the model's recommended
    /// (--generation-config), else 0].
    #[arg(long)]
    temperature: Option<f32>,
    /// Keep only the K most likely tokens when sampling (0: off) [default: the model's, else 0].
    #[arg(long)]
    top_k: Option<u32>,
    /// Nucleus sampling threshold (1: off) [default: the model's, else 1].
    #[arg(long)]
    top_p: Option<f32>,
    /// Drop tokens below this fraction of the best one's probability (0: off) [default: the
    /// model's, else 0].
    #[arg(long)]
    min_p: Option<f32>,
    /// Seed of the sampler's random stream.
    #[arg(long)]
    seed: Option<u64>,
    /// Report the K most likely tokens at each generated position (JSON output).
    #[arg(long)]
    top_logprobs: Option<u32>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Keep generating past end-of-generation tokens (for benchmarks).
    #[arg(long)]
    ignore_eos: bool,
    /// Stop when this text appears (repeat for several); it is not printed.
    #[arg(long)]
    stop: Vec<String>,
    /// A LoRA adapter (GGUF LoRA file or PEFT directory) applied to every prompt.
    #[arg(long)]
    lora: Option<PathBuf>,
    /// Multiplies the adapter's alpha / rank.
    #[arg(long, default_value_t = 1.0, requires = "lora")]
    lora_scale: f32,
    #[command(flatten)]
    engine: EngineArgs,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    Text,
    Json,
}

/// One prompt's generation as it comes.
#[derive(Default)]
struct Generated {
    text: String,
    token_ids: Vec<u32>,
    logprobs: Vec<PositionLogprobs>,
    /// OpenAI spelling: "stop" (end-of-generation token or stop string) or "length".
    finish: Option<&'static str>,
    cached_tokens: usize,
    /// Arrival to first token, and first token to last.
    ttft: Duration,
    first_at: Option<Instant>,
    last_at: Option<Instant>,
    /// Text not printed yet (text format prints the prompts in order).
    unprinted: String,
}

/// The engine fields under their flag names, for error messages.
const FLAGS: FieldNames = FieldNames {
    prompt: "--prompt",
    max_tokens: "--max-tokens",
    logprobs: "--top-logprobs",
};

/// The sampling of every prompt: a flag, else the model's recommendation `d`, else greedy (the
/// command's own default, as llama.cpp's golden outputs were made).
fn sampling(args: &GenerateArgs, d: &SamplingDefaults) -> SamplingParams {
    SamplingParams {
        temperature: args.temperature.or(d.temperature).unwrap_or(0.0),
        top_k: args
            .top_k
            .or(d.top_k.map(|k| u32::try_from(k).unwrap_or(0)))
            .unwrap_or(0),
        top_p: args.top_p.or(d.top_p).unwrap_or(1.0),
        min_p: args.min_p.or(d.min_p).unwrap_or(0.0),
        repetition_penalty: d.repetition_penalty.unwrap_or(1.0),
        presence_penalty: d.presence_penalty.unwrap_or(0.0),
        frequency_penalty: d.frequency_penalty.unwrap_or(0.0),
        seed: args.seed,
        max_tokens: args.max_tokens,
        ignore_eos: args.ignore_eos,
        logprobs: args.top_logprobs,
        ..SamplingParams::default()
    }
}

pub fn run(args: GenerateArgs) -> anyhow::Result<()> {
    let setup = args.engine.resolve()?;
    // Caught again with the prompts below; here so a bad flag costs no model load.
    sampling(&args, &SamplingDefaults::default())
        .validate()
        .context("invalid sampling arguments")?;
    let prompts = read_prompts(&args)?;
    let path = model_path::resolve(args.model.clone(), false)?;
    if args.engine.run_mpi_worker(&path)? {
        return Ok(());
    }
    let template_text = match &args.chat_template {
        Some(p) => Some(
            std::fs::read_to_string(p)
                .with_context(|| format!("cannot read chat template {}", p.display()))?,
        ),
        None => None,
    };
    let m = load_engine(
        &path,
        &LoadOptions {
            setup: &setup,
            chat_template: template_text.as_deref(),
            // Every output of every prompt may wait while earlier prompts are printed.
            output_buffer: args.max_tokens as usize + 16,
            quantization: args.engine.quantization()?,
            kv_events: None,
            turns: None,
            generation_config: &args.engine.generation_config,
        },
    )
    .with_context(|| format!("cannot load model {}", path.display()))?;
    let params = sampling(&args, &m.sampling_defaults);
    let chat = args.chat || args.chat_template.is_some();
    let mut encoded = Vec::with_capacity(prompts.len());
    for text in &prompts {
        let text = if chat {
            let message = [ProtocolMessage::new(Role::User, text.clone())];
            chat_prompt::render(&m.template, &message, &PromptOptions::NEW_TURN, None)
                .context("cannot apply the chat template")?
        } else {
            text.clone()
        };
        // Special tokens always, as llama.cpp's `llama-cli` adds them (the golden tests' form).
        encoded.push(chat_prompt::tokenize(&m.tokenizer, &text, Some(true)));
    }
    let mut request = ValidRequest::new(
        m.engine.limits(),
        Unchecked {
            prompts: encoded,
            max_tokens: Some(args.max_tokens),
            params,
            priority: 0,
            cache_salt: None,
            text: TextOptions {
                stop: args.stop.clone(),
                skip_special_tokens: true,
                include_stop_str_in_output: false,
            },
            stream: false,
            include_usage: false,
        },
        FLAGS,
    )?;
    if let Some(p) = &args.lora {
        let opts = pagoda_model::LoraOptions {
            scale: args.lora_scale,
            ..Default::default()
        };
        let adapter = pagoda_server::read_adapter(p, &m.config, &opts)
            .map_err(|e| anyhow::anyhow!("--lora {}: {e}", p.display()))?;
        let digest = adapter.digest();
        let name = p.display().to_string();
        request.with_lora(&pagoda_core::LoraRef::new(
            name,
            digest,
            std::sync::Arc::new(adapter),
        ));
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let t0 = Instant::now();
    let results = runtime.block_on(drive(&m, &request, args.format == Format::Text))?;
    let stdout = std::io::stdout();
    let single = results.len() == 1;
    let mut total_generated = 0;
    let mut total_prompt = 0;
    for (p, (text, result)) in prompts.iter().zip(&results).enumerate() {
        let ids = request.prompt(p);
        let prompt_tokens = ids.len();
        let finish = result.finish.unwrap_or("length");
        match args.format {
            Format::Text => {
                if single {
                    let pp = prompt_tokens as f64 / result.ttft.as_secs_f64();
                    // The first token comes out of the prompt step, so decode speed is
                    // measured over the remaining ones.
                    let decoded = result.token_ids.len().saturating_sub(1);
                    let decode = match (result.first_at, result.last_at) {
                        (Some(a), Some(b)) => b - a,
                        _ => Duration::ZERO,
                    };
                    let tg = decoded as f64 / decode.as_secs_f64();
                    eprintln!(
                        "\n[prompt: {prompt_tokens} tokens, {pp:.1} tok/s | generation: {} tokens, {tg:.1} tok/s | finish: {finish}]",
                        result.token_ids.len(),
                    );
                }
            }
            Format::Json => {
                let mut obj = serde_json::json!({
                    "prompt": text,
                    "prompt_token_ids": ids,
                    "token_ids": result.token_ids,
                    "text": result.text,
                    "finish_reason": finish,
                    "cached_tokens": result.cached_tokens,
                    "ttft_ms": result.ttft.as_secs_f64() * 1e3,
                });
                if args.top_logprobs.is_some() {
                    obj["top_logprobs"] = result
                        .logprobs
                        .iter()
                        .map(|s| {
                            s.top
                                .iter()
                                .map(|t| serde_json::json!({"token_id": t.token_id, "logprob": t.logprob}))
                                .collect::<Vec<_>>()
                        })
                        .collect();
                }
                writeln!(stdout.lock(), "{obj}")?;
            }
        }
        total_generated += result.token_ids.len();
        total_prompt += prompt_tokens;
    }
    let wall = t0.elapsed().as_secs_f64();
    if let Some(c) = m.engine.stats().spec {
        // vLLM's summary: acceptance rate over proposed tokens, and tokens per verification
        // (the accepted run plus the target's own token).
        let rate = c.num_accepted_tokens as f64 / c.num_draft_tokens.max(1) as f64;
        let mean_len = 1.0 + c.num_accepted_tokens as f64 / c.num_drafts.max(1) as f64;
        eprintln!(
            "[speculative: {} drafts, {} tokens proposed, {} accepted ({:.1}%), mean acceptance length {mean_len:.2}]",
            c.num_drafts,
            c.num_draft_tokens,
            c.num_accepted_tokens,
            rate * 100.0
        );
    }
    if !single {
        eprintln!(
            "[{} prompts as one batch: {total_prompt} prompt + {total_generated} generated tokens in {wall:.2} s | {:.1} generated tok/s, {:.1} total tok/s]",
            results.len(),
            total_generated as f64 / wall,
            (total_prompt + total_generated) as f64 / wall,
        );
    }
    m.engine.shutdown();
    Ok(())
}

/// Runs every prompt as one batch. With `print`, text is streamed to stdout prompt after
/// prompt: the first unfinished one live, the others' text held until their turn.
async fn drive(
    m: &pagoda_server::LoadedModel,
    request: &ValidRequest,
    print: bool,
) -> anyhow::Result<Vec<Generated>> {
    let mut generation = Generation::start(&m.engine, &m.tokenizer, request, None, None)?;
    let mut results: Vec<Generated> = (0..generation.num_choices())
        .map(|_| Generated::default())
        .collect();
    let stdout = std::io::stdout();
    let mut printing = 0;
    let emit = |piece: &str| {
        if print && !piece.is_empty() {
            let mut out = stdout.lock();
            // A closed stdout (e.g. `| head`) must not abort generation mid-way.
            let _ = out.write_all(piece.as_bytes());
            let _ = out.flush();
        }
    };
    while let Some(update) = generation.next().await {
        let u = update?;
        let now = Instant::now();
        let r = &mut results[u.index as usize];
        r.text.push_str(&u.text);
        r.unprinted.push_str(&u.text);
        r.token_ids.extend(&u.token_ids);
        r.logprobs.extend(u.logprobs);
        r.cached_tokens = u.cached_tokens;
        if let Some(t) = u.first_token_after {
            r.ttft = t;
            r.first_at = Some(now);
        }
        if !u.token_ids.is_empty() {
            r.last_at = Some(now);
        }
        if let Some(f) = u.finish {
            r.finish = Some(match f.reason {
                FinishReason::Length => "length",
                _ => "stop",
            });
        }
        // Print what is due: the current prompt's text, then every finished one after it.
        while let Some(r) = results.get_mut(printing) {
            emit(&std::mem::take(&mut r.unprinted));
            if r.finish.is_none() {
                break;
            }
            if print {
                emit("\n");
            }
            printing += 1;
        }
    }
    Ok(results)
}

/// The prompts to run: `--prompt`, or every line of `--prompts-file`.
fn read_prompts(args: &GenerateArgs) -> anyhow::Result<Vec<String>> {
    if let Some(p) = &args.prompt {
        return Ok(vec![p.clone()]);
    }
    let Some(path) = &args.prompts_file else {
        bail!("give --prompt TEXT or --prompts-file FILE");
    };
    let body = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read prompts file {}", path.display()))?;
    let mut prompts = Vec::new();
    for (i, line) in body.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let where_ = || format!("{} line {}", path.display(), i + 1);
        let value: serde_json::Value =
            serde_json::from_str(line).with_context(|| format!("{}: not valid JSON", where_()))?;
        match value.get("prompt") {
            Some(serde_json::Value::String(s)) => prompts.push(s.clone()),
            _ => bail!("{}: expected an object with a \"prompt\" string", where_()),
        }
    }
    if prompts.is_empty() {
        bail!("{}: no prompts in the file", path.display());
    }
    Ok(prompts)
}
