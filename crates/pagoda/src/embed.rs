//! `pagoda embed`: embeddings on the command line. One text per line from files or standard
//! input, checked by the same rules (`prepare/embed.rs`) and run by the same batcher as the
//! server's `/v1/embeddings`, written as JSONL (one JSON array a line, in input order) or a
//! NumPy `.npy` file of float32 `[inputs, dim]`; a progress bar on a terminal for large inputs.

use std::io::{BufRead, Write};
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use pagoda_protocol::Prompt;
use pagoda_server::model::embedder::{DEFAULT_MAX_BATCH_TOKENS, EmbedJob, Embedder};
use pagoda_server::prepare::embed::{self, EmbedOptions, Truncate};

/// Inputs handed to the batcher at a time: enough to fill its steps, few enough that the
/// progress bar moves.
const CHUNK: usize = 256;
/// Inputs from which the progress bar shows.
const PROGRESS_FROM: usize = 1000;

#[derive(Args)]
pub struct EmbedArgs {
    /// A sentence-transformers checkpoint directory, or its catalog name (all-minilm,
    /// embeddinggemma).
    #[arg(long, env = "PAGODA_MODEL")]
    model: PathBuf,
    /// Files of texts, one a line; none or `-`: standard input.
    files: Vec<PathBuf>,
    /// `jsonl`: one JSON array of floats a line, line i for input line i; `npy`: a NumPy
    /// float32 array of shape (inputs, dimensions).
    #[arg(long, default_value = "jsonl", value_parser = ["jsonl", "npy"])]
    format: String,
    /// Write to this file instead of standard output.
    #[arg(long, short)]
    output: Option<PathBuf>,
    /// The model's prompt put before each text (config_sentence_transformers.json: `query`,
    /// `document`, ...).
    #[arg(long)]
    prompt_name: Option<String>,
    /// Cut the vectors to this length (a Matryoshka model's lengths only).
    #[arg(long)]
    dimensions: Option<i64>,
    /// Cut inputs longer than the model takes (their end) instead of failing.
    #[arg(long)]
    truncate: bool,
    /// What the checkpoint's matrices are quantized to at load.
    #[arg(long, default_value = "q8_0", value_parser = ["q8_0", "q4_k", "q4_0", "none"])]
    quantization: String,
    /// Most tokens one forward pass runs.
    #[arg(long, default_value_t = DEFAULT_MAX_BATCH_TOKENS)]
    max_batch_tokens: usize,
    /// Compute threads [default: all cores].
    #[arg(long, env = "PAGODA_THREADS")]
    threads: Option<usize>,
}

/// An input line and where it came from, for errors.
struct Line {
    text: String,
    source: String,
    number: usize,
}

pub fn run(args: EmbedArgs) -> anyhow::Result<()> {
    crate::engine_args::set_threads(args.threads)?;
    if args.max_batch_tokens == 0 {
        anyhow::bail!("--max-batch-tokens must be at least 1");
    }
    let quantization = pagoda_hf::Quantization::from_name(&args.quantization)
        .with_context(|| format!("--quantization {}", args.quantization))?;
    let lines = read_lines(&args.files)?;
    let model = crate::model_path::resolve(Some(args.model.clone()), false)?;
    let embedder = Embedder::load(
        &model,
        quantization,
        args.max_batch_tokens,
        Default::default(),
    )
    .with_context(|| format!("cannot load {}", model.display()))?;
    if embedder.cross_encoder {
        anyhow::bail!(
            "{} is a cross-encoder: it scores text pairs (serve it for POST /v1/rerank and /v1/score) and has no embeddings",
            model.display()
        );
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .context("cannot start the async runtime")?;
    let bar = if lines.len() >= PROGRESS_FROM {
        let bar = ProgressBar::new(lines.len() as u64);
        let style =
            ProgressStyle::with_template("[{elapsed_precise}] {bar:40} {pos}/{len} ({per_sec})")
                .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        bar
    } else {
        ProgressBar::hidden()
    };
    let mut out: Box<dyn Write> = match &args.output {
        Some(p) => Box::new(
            std::fs::File::create(p).with_context(|| format!("cannot create {}", p.display()))?,
        ),
        None => Box::new(std::io::stdout().lock()),
    };
    let mut out = std::io::BufWriter::new(&mut out);
    let npy = args.format == "npy";
    let mut all: Vec<f32> = Vec::new();
    let mut dim = 0;
    for chunk in lines.chunks(CHUNK) {
        let mut job = EmbedJob {
            seqs: Vec::with_capacity(chunk.len()),
            dimensions: None,
            normalize: embedder.normalize,
        };
        for line in chunk {
            let input = Prompt::Text(line.text.clone());
            let one = embed::check(
                &embedder,
                &EmbedOptions {
                    input: &input,
                    input_field: "input",
                    dimensions: args.dimensions,
                    truncate: if args.truncate {
                        Truncate::KeepFirst(embedder.max_seq_len)
                    } else {
                        Truncate::No
                    },
                    truncate_hint: "pass --truncate",
                    prompt_name: args.prompt_name.as_deref(),
                    normalize: None,
                },
            )
            .with_context(|| format!("{} line {}", line.source, line.number))?;
            (job.dimensions, job.normalize) = (one.dimensions, one.normalize);
            job.seqs.extend(one.seqs);
        }
        let vectors = runtime
            .block_on(embedder.vectors(job))
            .map_err(anyhow::Error::msg)?;
        for v in vectors {
            dim = v.len();
            if npy {
                all.extend_from_slice(&v);
            } else {
                serde_json::to_writer(&mut out, &v)?;
                out.write_all(b"\n")?;
            }
        }
        bar.inc(chunk.len() as u64);
    }
    bar.finish_and_clear();
    if npy {
        write_npy(&mut out, &all, lines.len(), dim)?;
    }
    out.flush().context("cannot write the output")?;
    Ok(())
}

/// Every line of `files` (standard input for none or `-`).
fn read_lines(files: &[PathBuf]) -> anyhow::Result<Vec<Line>> {
    let stdin = [PathBuf::from("-")];
    let files = if files.is_empty() { &stdin[..] } else { files };
    let mut lines = Vec::new();
    for f in files {
        let (source, reader): (String, Box<dyn BufRead>) = if f.as_os_str() == "-" {
            (
                "standard input".to_owned(),
                Box::new(std::io::stdin().lock()),
            )
        } else {
            let file =
                std::fs::File::open(f).with_context(|| format!("cannot open {}", f.display()))?;
            (
                f.display().to_string(),
                Box::new(std::io::BufReader::new(file)),
            )
        };
        for (i, text) in reader.lines().enumerate() {
            let text = text.with_context(|| format!("cannot read {source}"))?;
            lines.push(Line {
                text,
                source: source.clone(),
                number: i + 1,
            });
        }
    }
    Ok(lines)
}

/// A NumPy `.npy` (format 1.0) of little-endian float32 `[rows, cols]`: the magic, a header
/// dict padded with spaces to a multiple of 64 bytes, then the values.
fn write_npy(
    out: &mut impl Write,
    values: &[f32],
    rows: usize,
    cols: usize,
) -> std::io::Result<()> {
    let dict = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({rows}, {cols}), }}");
    // magic (6) + version (2) + length (2) + dict + padding + '\n' = a multiple of 64.
    let unpadded = 10 + dict.len() + 1;
    let header = format!(
        "{dict}{}\n",
        " ".repeat(unpadded.next_multiple_of(64) - unpadded)
    );
    out.write_all(b"\x93NUMPY\x01\x00")?;
    out.write_all(&(header.len() as u16).to_le_bytes())?;
    out.write_all(header.as_bytes())?;
    for v in values {
        out.write_all(&v.to_le_bytes())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn npy_header_is_aligned_and_complete() {
        let mut buf = Vec::new();
        write_npy(&mut buf, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 2, 3).unwrap();
        assert_eq!(&buf[..8], b"\x93NUMPY\x01\x00");
        let len = u16::from_le_bytes([buf[8], buf[9]]) as usize;
        assert_eq!((10 + len) % 64, 0);
        let header = std::str::from_utf8(&buf[10..10 + len]).unwrap();
        assert!(header.contains("'shape': (2, 3)"), "{header}");
        assert!(header.ends_with('\n'));
        assert_eq!(buf.len(), 10 + len + 6 * 4);
        assert_eq!(&buf[10 + len..10 + len + 4], &1f32.to_le_bytes());
    }
}
