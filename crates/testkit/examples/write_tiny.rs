//! Writes a tiny random model to a GGUF file, for running peers (llama.cpp) on the same file
//! whose outputs the tests record as fixtures:
//!   cargo run -p pagoda-testkit --example write_tiny -- qwen3 /tmp/tiny-qwen3.gguf

use pagoda_testkit::tiny_model::TinyModel;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(arch), Some(path)) = (args.get(1), args.get(2)) else {
        eprintln!("usage: write_tiny llama|qwen3|gemma3 OUT.gguf");
        std::process::exit(2);
    };
    let spec = match arch.as_str() {
        "llama" => TinyModel::llama(),
        "qwen3" => TinyModel::qwen3(),
        "gemma3" => TinyModel::gemma3(),
        other => {
            eprintln!("unknown architecture {other}");
            std::process::exit(2);
        }
    };
    if let Err(e) = std::fs::write(path, spec.to_bytes()) {
        eprintln!("{path}: {e}");
        std::process::exit(1);
    }
}
