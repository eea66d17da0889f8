//! `pagoda chat`: an interactive terminal chat, against a running server (`--url`) or a local
//! model (served in-process on a loopback port, so both go through the same HTTP client and the
//! same Chat Completions path). Answers stream as they are generated; the history is kept for
//! the next turn; `/reset`, `/system TEXT`, `/exit`; Ctrl-C stops the current answer only.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Args;
use futures_util::StreamExt;
use pagoda_protocol::SseParser;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::engine_args::EngineArgs;
use crate::local_server::{self, LocalServer};
use crate::model_path;

#[derive(Args)]
pub struct ChatArgs {
    /// A running OpenAI-compatible server, e.g. http://127.0.0.1:8000 (without it, the local
    /// --model is loaded).
    #[arg(long, conflicts_with = "model")]
    url: Option<String>,
    /// GGUF model file to chat with locally, or a fetched catalog name (`pagoda list`)
    /// [default: qwen2.5-coder:0.5b]
    #[arg(long, env = "PAGODA_MODEL")]
    model: Option<PathBuf>,
    /// Bearer key for --url.
    #[arg(long, env = "PAGODA_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// The `model` to ask --url for [default: the first of its /v1/models].
    #[arg(long)]
    model_name: Option<String>,
    /// The system prompt to start with.
    #[arg(long)]
    system: Option<String>,
    /// Most tokens per answer [default: the server's].
    #[arg(long)]
    max_tokens: Option<u32>,
    /// Sampling temperature [default: the model's recommended (--generation-config), else the
    /// server's].
    #[arg(long)]
    temperature: Option<f32>,
    #[command(flatten)]
    engine: EngineArgs,
}

const HELP: &str = "commands: /reset (forget the conversation), /system TEXT (set the system \
                    prompt), /exit (or Ctrl-D); Ctrl-C stops an answer";

/// What the user typed.
#[derive(Debug, PartialEq, Eq)]
enum Input {
    Say(String),
    Reset,
    System(String),
    Exit,
    Help,
    Nothing,
}

fn parse_input(line: &str) -> Input {
    let line = line.trim();
    match line.split_once(' ').unwrap_or((line, "")) {
        ("", _) => Input::Nothing,
        ("/exit" | "/quit", _) => Input::Exit,
        ("/reset", _) => Input::Reset,
        ("/system", text) => Input::System(text.trim().to_owned()),
        (c, _) if c.starts_with('/') => Input::Help,
        _ => Input::Say(line.to_owned()),
    }
}

/// The conversation so far.
#[derive(Default)]
struct History {
    system: Option<String>,
    turns: Vec<Value>,
}

impl History {
    fn messages(&self) -> Vec<Value> {
        let system = self
            .system
            .iter()
            .map(|s| json!({"role": "system", "content": s}));
        system.chain(self.turns.iter().cloned()).collect()
    }
}

pub fn run(args: ChatArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("pagoda-chat")
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(chat(args))
}

async fn chat(args: ChatArgs) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    // The local server (when there is no --url) lives as long as the conversation.
    let (base, model, _server) = match &args.url {
        Some(url) => {
            let base = url.trim_end_matches('/').trim_end_matches("/v1").to_owned();
            let model = match &args.model_name {
                Some(m) => m.clone(),
                None => first_model(&http, &base, args.api_key.as_deref()).await?,
            };
            (base, model, None)
        }
        None => {
            let (base, model, server) = serve_locally(&args).await?;
            (base, model, Some(server))
        }
    };
    let mut history = History {
        system: args.system.clone(),
        ..History::default()
    };
    eprintln!("pagoda chat with `{model}` at {base}; {HELP}");
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    loop {
        print!("> ");
        std::io::stdout().flush()?;
        let line = tokio::select! {
            line = lines.next_line() => line?,
            _ = tokio::signal::ctrl_c() => {
                println!("\n(/exit to leave)");
                continue;
            }
        };
        let Some(line) = line else {
            println!();
            return Ok(()); // Ctrl-D
        };
        match parse_input(&line) {
            Input::Nothing => {}
            Input::Exit => return Ok(()),
            Input::Help => println!("{HELP}"),
            Input::Reset => {
                history.turns.clear();
                println!("(conversation reset)");
            }
            Input::System(text) => {
                history.system = (!text.is_empty()).then_some(text);
                println!("(system prompt set)");
            }
            Input::Say(text) => {
                history.turns.push(json!({"role": "user", "content": text}));
                let body = json!({
                    "model": model,
                    "messages": history.messages(),
                    "stream": true,
                    "temperature": args.temperature,
                    "max_tokens": args.max_tokens,
                });
                let answer = tokio::select! {
                    a = stream_answer(&http, &base, args.api_key.as_deref(), &body) => a,
                    _ = tokio::signal::ctrl_c() => Err(Stopped.into()),
                };
                match answer {
                    Ok(text) => {
                        println!();
                        history
                            .turns
                            .push(json!({"role": "assistant", "content": text}));
                    }
                    Err(e) if e.is::<Stopped>() => {
                        // The partial answer is dropped with the request; the question stays
                        // out of the history too, so the next turn starts clean.
                        history.turns.pop();
                        println!("\n(stopped)");
                    }
                    Err(e) => {
                        history.turns.pop();
                        println!("\nerror: {e:#}");
                    }
                }
            }
        }
    }
}

/// Ctrl-C during an answer.
#[derive(Debug, thiserror::Error)]
#[error("stopped")]
struct Stopped;

/// Streams one answer to stdout; returns its whole text.
async fn stream_answer(
    http: &reqwest::Client,
    base: &str,
    key: Option<&str>,
    body: &Value,
) -> anyhow::Result<String> {
    let mut req = http.post(format!("{base}/v1/chat/completions")).json(body);
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    let res = req.send().await.context("cannot reach the server")?;
    if !res.status().is_success() {
        let status = res.status();
        let text = res.text().await.unwrap_or_default();
        let msg = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
            .unwrap_or(text);
        bail!("{status}: {msg}");
    }
    let mut parser = SseParser::new();
    let mut bytes = res.bytes_stream();
    let mut answer = String::new();
    let mut out = std::io::stdout();
    while let Some(chunk) = bytes.next().await {
        for event in parser.feed(&chunk.context("the answer was cut off")?) {
            if event.data == "[DONE]" {
                return Ok(answer);
            }
            let v: Value = serde_json::from_str(&event.data).context("a malformed chunk")?;
            if let Some(msg) = v["error"]["message"].as_str() {
                bail!("{msg}");
            }
            if let Some(delta) = v["choices"][0]["delta"]["content"].as_str() {
                answer.push_str(delta);
                print!("{delta}");
                out.flush()?;
            }
        }
    }
    Ok(answer)
}

async fn first_model(
    http: &reqwest::Client,
    base: &str,
    key: Option<&str>,
) -> anyhow::Result<String> {
    let mut req = http.get(format!("{base}/v1/models"));
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    let v: Value = req
        .send()
        .await
        .with_context(|| format!("cannot reach {base}"))?
        .json()
        .await
        .context("/v1/models did not answer JSON")?;
    v["data"][0]["id"]
        .as_str()
        .map(str::to_owned)
        .context("the server lists no models")
}

/// The model of `args` on a loopback port of this process, for as long as the returned handle
/// lives.
async fn serve_locally(args: &ChatArgs) -> anyhow::Result<(String, String, LocalServer)> {
    let setup = args.engine.resolve()?;
    let path = model_path::resolve(args.model.clone(), false)?;
    let name = "local".to_owned();
    let config = pagoda_server::ServerConfig {
        served_model_name: name.clone(),
        generation_config: args.engine.generation_config.clone(),
        ..pagoda_server::ServerConfig::default()
    };
    eprintln!("pagoda: loading {}", path.display());
    let server = local_server::start(path, setup, config).await?;
    Ok((server.base_url.clone(), name, server))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_parse() {
        assert_eq!(parse_input("  hi there "), Input::Say("hi there".into()));
        assert_eq!(parse_input("/reset"), Input::Reset);
        assert_eq!(
            parse_input("/system Be brief."),
            Input::System("Be brief.".into())
        );
        assert_eq!(parse_input("/exit"), Input::Exit);
        assert_eq!(parse_input("/what"), Input::Help);
        assert_eq!(parse_input("   "), Input::Nothing);
    }

    #[test]
    fn history_puts_the_system_prompt_first() {
        let mut h = History::default();
        h.turns.push(json!({"role": "user", "content": "a"}));
        assert_eq!(h.messages().len(), 1);
        h.system = Some("s".into());
        assert_eq!(h.messages()[0]["role"], "system");
    }
}
