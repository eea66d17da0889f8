//! `pagoda generate`: runs prompts through the engine (all of a file's prompts as one
//! continuous batch) and prints the results, streamed as text or as one JSON object per prompt,
//! then the aggregate throughput.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use pagoda_core::engine::{EngineHandle, HandleOptions, RequestStream};
use pagoda_core::{EngineRequest, PositionLogprobs, SamplingParams};
use pagoda_frontend::{ChatMessage, ChatTemplate, TextStream, TextStreamOptions, Tokenizer};
use pagoda_gguf::GgufFile;
use pagoda_model::Model;

use crate::engine_args::EngineArgs;
use crate::model_path;

#[derive(Args)]
pub struct GenerateArgs {
    /// GGUF model file [default: SmolLM2-135M-Instruct Q4_1 in $PAGODA_MODEL_DIR]
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
    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    /// Keep only the K most likely tokens when sampling (0: off).
    #[arg(long, default_value_t = 0)]
    top_k: u32,
    /// Nucleus sampling threshold (1: off).
    #[arg(long, default_value_t = 1.0)]
    top_p: f32,
    /// Drop tokens below this fraction of the best one's probability (0: off).
    #[arg(long, default_value_t = 0.0)]
    min_p: f32,
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
    #[command(flatten)]
    engine: EngineArgs,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    Text,
    Json,
}

/// One prompt's finished generation.
struct Generated {
    token_ids: Vec<u32>,
    logprobs: Vec<PositionLogprobs>,
    /// OpenAI spelling: "stop" (end-of-generation token or stop string) or "length".
    finish: &'static str,
    prompt_tokens: usize,
    cached_tokens: usize,
    /// Arrival to first token, and first token to last.
    ttft: Duration,
    decode: Duration,
}

pub fn run(args: GenerateArgs) -> anyhow::Result<()> {
    let setup = args.engine.resolve()?;
    let params = SamplingParams {
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
        min_p: args.min_p,
        seed: args.seed,
        max_tokens: args.max_tokens,
        ignore_eos: args.ignore_eos,
        logprobs: args.top_logprobs,
        ..SamplingParams::default()
    };
    params.validate().context("invalid sampling arguments")?;

    let path = model_path::resolve(args.model.clone())?;
    let file = Arc::new(
        GgufFile::open(&path).with_context(|| format!("cannot load model {}", path.display()))?,
    );
    let tokenizer = Arc::new(Tokenizer::from_gguf(&file).context("cannot build the tokenizer")?);
    let text_options = TextStreamOptions {
        stop: args.stop.clone(),
        ..TextStreamOptions::default()
    };
    // Checks the stop strings before any work is done.
    TextStream::new(tokenizer.clone(), &[], text_options.clone()).context("--stop")?;
    let template = if args.chat || args.chat_template.is_some() {
        let text = match &args.chat_template {
            Some(p) => Some(
                std::fs::read_to_string(p)
                    .with_context(|| format!("cannot read chat template {}", p.display()))?,
            ),
            None => None,
        };
        Some(
            ChatTemplate::from_gguf(&file, text.as_deref())
                .context("cannot load the chat template")?,
        )
    } else {
        None
    };
    let model = Model::load(file.clone())
        .with_context(|| format!("cannot load model {}", path.display()))?;
    let context_length = model.config().context_length;

    let prompts = read_prompts(&args)?;
    let mut encoded = Vec::with_capacity(prompts.len());
    for text in &prompts {
        let text = match &template {
            Some(t) => t
                .render(
                    &[ChatMessage {
                        role: "user".into(),
                        content: text.clone(),
                    }],
                    true,
                )
                .context("cannot apply the chat template")?,
            None => text.clone(),
        };
        let ids = tokenizer.encode(&text, true, true);
        if ids.is_empty() {
            bail!("a prompt encodes to no tokens: give a non-empty prompt");
        }
        if ids.len() + args.max_tokens as usize > context_length {
            bail!(
                "a prompt of {} tokens plus --max-tokens {} exceeds the model's context of {} tokens",
                ids.len(),
                args.max_tokens,
                context_length
            );
        }
        encoded.push(ids);
    }

    let (core, _report) =
        pagoda_model::build_engine(model, &setup).context("cannot set up the engine")?;
    let engine = EngineHandle::start(
        core,
        HandleOptions {
            // Every output of every prompt may wait while earlier prompts are printed.
            output_buffer: args.max_tokens as usize + 16,
        },
    )
    .context("cannot start the engine thread")?;

    let t0 = Instant::now();
    let mut streams = Vec::with_capacity(encoded.len());
    for ids in &encoded {
        let stream = engine
            .add_request(EngineRequest {
                id: 0,
                prompt_token_ids: ids.clone(),
                params: params.clone(),
                priority: 0,
                extra_keys: Default::default(),
            })
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        streams.push(stream);
    }
    let stdout = std::io::stdout();
    let mut total_generated = 0;
    let mut total_prompt = 0;
    let single = encoded.len() == 1;
    for ((text, ids), stream) in prompts.iter().zip(&encoded).zip(&mut streams) {
        let mut text_stream = TextStream::new(tokenizer.clone(), ids, text_options.clone())?;
        let print = args.format == Format::Text;
        let mut out = stdout.lock();
        let mut emit = |piece: &str| {
            if print && !piece.is_empty() {
                // A closed stdout (e.g. `| head`) must not abort generation mid-way.
                let _ = out.write_all(piece.as_bytes());
                let _ = out.flush();
            }
        };
        let mut result = collect(stream, |tok| {
            let delta = text_stream.push(tok);
            emit(&delta.text);
            delta.stopped.is_some()
        })?;
        emit(&text_stream.finish().text);
        if text_stream.stop_match().is_some() {
            result.finish = "stop";
        }
        drop(out);
        match args.format {
            Format::Text => {
                writeln!(stdout.lock())?;
                if single {
                    let pp = result.prompt_tokens as f64 / result.ttft.as_secs_f64();
                    // The first token comes out of the prompt step, so decode speed is
                    // measured over the remaining ones.
                    let decoded = result.token_ids.len().saturating_sub(1);
                    let tg = decoded as f64 / result.decode.as_secs_f64();
                    eprintln!(
                        "\n[prompt: {} tokens, {pp:.1} tok/s | generation: {} tokens, {tg:.1} tok/s | finish: {}]",
                        result.prompt_tokens,
                        result.token_ids.len(),
                        result.finish
                    );
                }
            }
            Format::Json => {
                let mut obj = serde_json::json!({
                    "prompt": text,
                    "prompt_token_ids": ids,
                    "token_ids": result.token_ids,
                    "text": text_stream.text(),
                    "finish_reason": result.finish,
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
        total_prompt += result.prompt_tokens;
    }
    let wall = t0.elapsed().as_secs_f64();
    if !single {
        eprintln!(
            "[{} prompts as one batch: {total_prompt} prompt + {total_generated} generated tokens in {wall:.2} s | {:.1} generated tok/s, {:.1} total tok/s]",
            encoded.len(),
            total_generated as f64 / wall,
            (total_prompt + total_generated) as f64 / wall,
        );
    }
    engine.shutdown();
    Ok(())
}

/// Reads one request's stream to its end, calling `on_token` for each new token; `on_token`
/// returning true (a stop string matched) aborts the request in the engine.
fn collect(
    stream: &mut RequestStream,
    mut on_token: impl FnMut(u32) -> bool,
) -> anyhow::Result<Generated> {
    let mut g = Generated {
        token_ids: Vec::new(),
        logprobs: Vec::new(),
        finish: "length",
        prompt_tokens: 0,
        cached_tokens: 0,
        ttft: Duration::ZERO,
        decode: Duration::ZERO,
    };
    let mut first_at = None;
    while let Some(item) = stream.blocking_recv() {
        let out = item.map_err(|e| anyhow::anyhow!("{e}"))?;
        let mut stopped = false;
        for &t in &out.new_token_ids {
            if on_token(t) {
                stopped = true;
                break;
            }
        }
        if !out.new_token_ids.is_empty() && first_at.is_none() {
            first_at = Some(out.timing.at);
            g.ttft = out.timing.at - out.timing.arrival;
        }
        if let Some(f) = first_at {
            g.decode = out.timing.at - f;
        }
        g.token_ids.extend(&out.new_token_ids);
        g.logprobs.extend(out.logprobs);
        g.prompt_tokens = out.num_prompt_tokens.max(g.prompt_tokens);
        g.cached_tokens = out.num_cached_tokens;
        if let Some(f) = out.finish_reason {
            g.finish = f.as_openai();
            break;
        }
        if stopped {
            stream.abort();
            break;
        }
    }
    Ok(g)
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
