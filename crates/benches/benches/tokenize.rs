//! Encoding speed on a ~100k-token document for each model's tokenizer (byte-level BPE for
//! SmolLM2/Qwen, score-merge SPM for Gemma), and streaming decode of the result.

use std::path::PathBuf;

use criterion::{Criterion, criterion_group, criterion_main};
use pagoda_frontend::{DecodeStream, Tokenizer};
use pagoda_gguf::GgufFile;

fn model(file: &str) -> Option<Tokenizer> {
    let dir = std::env::var_os("PAGODA_MODEL_DIR")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/pagoda/models"))
        })?;
    let f = GgufFile::open(&dir.join(file)).ok()?;
    Tokenizer::from_gguf(&f).ok()
}

/// Varied text: prose, code, numbers, accents, CJK and emoji, repeated with a counter so the
/// BPE word cache does not make every repetition free.
fn document(target_bytes: usize) -> String {
    let mut doc = String::new();
    let mut i = 0u64;
    while doc.len() < target_bytes {
        doc.push_str(&format!(
            "Section {i}. The quick brown fox jumps over the lazy dog; naïve café owners in Zürich \
             counted {} crates. 日本語の文章 and 中文 text with emoji 🤖🚀 appear here.\n\
             fn item_{i}(x: u64) -> u64 {{\n    x.wrapping_mul({}) ^ 0x{:x}\n}}\n\n",
            i * 7919 % 10007,
            i % 97,
            i * 2654435761 % 65536
        ));
        i += 1;
    }
    doc
}

fn bench(c: &mut Criterion) {
    let doc = document(280_000);
    let mut g = c.benchmark_group("encode_100k_tokens");
    g.sample_size(10);
    for (name, file) in [
        ("smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
        ("gemma3", "gemma-3-270m-q4_k_m.gguf"),
        ("qwen2.5", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"),
    ] {
        let Some(tok) = model(file) else {
            eprintln!("skipping {name}: {file} not found (scripts/fetch-models.sh)");
            continue;
        };
        let n = tok.encode(&doc, false, false).len();
        eprintln!("{name}: document of {} bytes = {n} tokens", doc.len());
        g.bench_function(name, |b| {
            b.iter(|| tok.encode(std::hint::black_box(&doc), false, true))
        });
        let ids = tok.encode(&doc, false, true);
        g.bench_function(format!("{name}_stream_decode"), |b| {
            b.iter(|| {
                let mut ds = DecodeStream::new(&tok, false, &[]);
                ids.iter()
                    .filter_map(|&id| ds.step(id))
                    .map(|s| s.len())
                    .sum::<usize>()
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
