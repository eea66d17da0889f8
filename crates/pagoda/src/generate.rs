//! `pagoda generate`: runs prompts through the model one after another and prints the result,
//! streamed as text or as one JSON object per prompt. No server, no scheduler: the executor is
//! driven directly by `pagoda_model::generate`.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use pagoda_core::SamplingParams;
use pagoda_frontend::{ChatMessage, ChatTemplate, DecodeStream, Tokenizer};
use pagoda_gguf::GgufFile;
use pagoda_model::{CpuExecutor, GenerateOptions, Model};

use crate::model_path;

/// Tokens per KV block; the executor's arena is sized to the longest prompt plus `max_tokens`.
const BLOCK_SIZE: usize = 16;

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
    /// Compute threads [default: all cores].
    #[arg(long, env = "PAGODA_THREADS")]
    threads: Option<usize>,
    /// Keep generating past end-of-generation tokens (for benchmarks).
    #[arg(long)]
    ignore_eos: bool,
    /// Prompt tokens per prefill step [default: the whole prompt in one step].
    #[arg(long)]
    prefill_chunk: Option<usize>,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    Text,
    Json,
}

pub fn run(args: GenerateArgs) -> anyhow::Result<()> {
    if let Some(n) = args.threads {
        if n == 0 {
            bail!("--threads must be at least 1");
        }
        pagoda_kernels::parallel::set_num_threads(n);
    }
    if args.prefill_chunk == Some(0) {
        bail!("--prefill-chunk must be at least 1");
    }
    let params = SamplingParams {
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
        min_p: args.min_p,
        seed: args.seed,
        max_tokens: args.max_tokens,
        stop_token_ids: Vec::new(),
        ignore_eos: args.ignore_eos,
        logprobs: args.top_logprobs,
    };
    params.validate().context("invalid sampling arguments")?;

    let path = model_path::resolve(args.model.clone())?;
    let file = Arc::new(
        GgufFile::open(&path).with_context(|| format!("cannot load model {}", path.display()))?,
    );
    let tokenizer = Tokenizer::from_gguf(&file).context("cannot build the tokenizer")?;
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
    let longest = encoded.iter().map(Vec::len).max().unwrap_or(0) + args.max_tokens as usize;
    let mut exec = CpuExecutor::new(model, longest.div_ceil(BLOCK_SIZE), BLOCK_SIZE)
        .context("cannot set up the executor")?;

    let mut opts = GenerateOptions::new(params);
    opts.prefill_chunk = args.prefill_chunk;
    let stdout = std::io::stdout();
    for (text, ids) in prompts.iter().zip(&encoded) {
        match args.format {
            Format::Text => {
                let mut out = stdout.lock();
                let mut stream = DecodeStream::new(&tokenizer, true, ids);
                let result = pagoda_model::generate(&mut exec, ids, &opts, |tok| {
                    if let Some(piece) = stream.step(tok) {
                        // A closed stdout (e.g. `| head`) must not abort generation mid-way.
                        let _ = out.write_all(piece.as_bytes());
                        let _ = out.flush();
                    }
                })?;
                let tail = stream.flush().unwrap_or_default();
                writeln!(out, "{tail}")?;
                drop(out);
                let pp = result.prompt_tokens as f64 / result.prompt_time.as_secs_f64();
                // The first generated token comes out of the prompt step, so decode speed is
                // measured over the remaining ones.
                let decoded = result.token_ids.len().saturating_sub(1);
                let tg = decoded as f64 / result.generation_time.as_secs_f64();
                eprintln!(
                    "\n[prompt: {} tokens, {:.1} tok/s | generation: {} tokens, {:.1} tok/s | finish: {}]",
                    result.prompt_tokens,
                    pp,
                    result.token_ids.len(),
                    tg,
                    result.finish_reason.as_str()
                );
            }
            Format::Json => {
                let result = pagoda_model::generate(&mut exec, ids, &opts, |_| {})?;
                let mut obj = serde_json::json!({
                    "prompt": text,
                    "prompt_token_ids": ids,
                    "token_ids": result.token_ids,
                    "text": tokenizer.decode(&result.token_ids, true),
                    "finish_reason": result.finish_reason.as_str(),
                });
                if args.top_logprobs.is_some() {
                    obj["top_logprobs"] = result
                        .logprobs
                        .iter()
                        .map(|s| {
                            s.top_logprobs
                                .iter()
                                .map(|t| serde_json::json!({"token_id": t.token_id, "logprob": t.logprob}))
                                .collect::<Vec<_>>()
                        })
                        .collect();
                }
                writeln!(stdout.lock(), "{obj}")?;
            }
        }
    }
    Ok(())
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
