//! The `pagoda` command line: parses arguments and dispatches to the library crates. It holds no
//! engine logic of its own; errors reach the user as one line and a non-zero exit.

mod chat;
mod embed;
mod engine_args;
mod fetch;
mod generate;
mod kv_transfer_args;
mod local_server;
mod model_path;
mod models_cmd;
mod perplexity;
mod plan;
mod profile;
mod profile_served;
mod router;
mod serve;
mod speculative_args;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "pagoda",
    version,
    about = "An OpenAI-compatible LLM inference server, CPU-first"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Log lines on stderr as `text` or `json` (one object a line, with the request's span
    /// fields such as `request_id` and `tenant`).
    #[arg(long, global = true, env = "PAGODA_LOG_FORMAT", default_value = "text",
          value_parser = ["text", "json"])]
    log_format: String,
}

// Parsed once at start-up: the size of the largest variant (serve's flags) costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Generate text from a prompt (or a file of prompts) and print it.
    Generate(generate::GenerateArgs),
    /// Load-test any OpenAI-compatible server (pagoda, llama.cpp, vLLM) and report latencies.
    Bench(pagoda_bench::BenchArgs),
    /// Size a deployment: max goodput per replica within an SLO, the binding resource, KV
    /// memory, recommended serve flags and replicas, from this machine's measured step costs.
    Plan(plan::PlanArgs),
    /// Time this machine's forward passes for a model and write the cost profile `plan` reads.
    Profile(profile::ProfileArgs),
    /// Serve the model over an OpenAI-compatible HTTP API.
    Serve(serve::ServeArgs),
    /// Route OpenAI requests over several `pagoda serve` replicas (round robin, least load, or
    /// cache aware from their KV events).
    Router(router::RouterArgs),
    /// Chat in the terminal with a local model or a running server (--url).
    Chat(chat::ChatArgs),
    /// Perplexity of a model over a text file, and KL divergence against a saved base run.
    Perplexity(perplexity::PerplexityArgs),
    /// Embed texts (one a line, from files or standard input) with a sentence-transformers
    /// model, written as JSONL or a NumPy .npy file.
    Embed(embed::EmbedArgs),
    /// Fetch a model of the catalog by name (e.g. qwen2.5-coder:0.5b) into the model directory.
    Pull(models_cmd::PullArgs),
    /// The catalog's models: names, task, whether fetched, size and path.
    List,
    /// Delete a fetched model and its sidecar files.
    Rm(models_cmd::RmArgs),
}

fn main() {
    // `generate` prints its own results; the server's start-up facts (KV sizing, the address
    // served) show by default, the rest only on warnings.
    let generating = matches!(
        std::env::args().nth(1).as_deref(),
        Some(
            "generate"
                | "chat"
                | "perplexity"
                | "embed"
                | "pull"
                | "list"
                | "rm"
                | "plan"
                | "profile"
        )
    );
    let default_filter = if generating {
        "warn"
    } else {
        "warn,pagoda_model::engine_setup=info,pagoda_server=info,pagoda_router=info,pagoda=info"
    };
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if e.use_stderr() => {
            // clap's message spans several lines (the error, usage, hints); a bad argument
            // gets one line: the error part, joined.
            let msg = e.to_string();
            let head: Vec<&str> = msg
                .lines()
                .take_while(|l| !l.starts_with("Usage:"))
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect();
            eprintln!("{} (see --help)", head.join(" "));
            std::process::exit(2);
        }
        Err(e) => e.exit(), // --help, --version
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("PAGODA_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if cli.log_format == "json" {
        logs.json()
            .with_current_span(true)
            .with_span_list(false)
            .init();
    } else {
        logs.init();
    }
    let result = match cli.command {
        Command::Generate(args) => generate::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Router(args) => router::run(args),
        Command::Bench(args) => pagoda_bench::run(args),
        Command::Plan(args) => plan::run(args),
        Command::Profile(args) => profile::run(args),
        Command::Chat(args) => chat::run(args),
        Command::Perplexity(args) => perplexity::run(args),
        Command::Embed(args) => embed::run(args),
        Command::Pull(args) => models_cmd::pull(args),
        Command::List => models_cmd::list(),
        Command::Rm(args) => models_cmd::rm(args),
    };
    if let Err(e) = result {
        // `{:#}` prints the whole context chain on one line: "loading model: file X: ...".
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}
