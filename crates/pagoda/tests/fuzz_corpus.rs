//! The fuzz campaigns' minimised corpora (fuzz/corpus-min/TARGET.pack, packed by
//! fuzz/pack-corpus.py) replayed through the targets' own code (fuzz/inputs.rs, included here
//! and by every target): each input that once found new coverage runs again on every test
//! run, so a parser change that panics on one of them fails CI in seconds, not in a campaign.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;

include!("../../../fuzz/inputs.rs");

/// The inputs of one pack: records of a little-endian u32 length and that many bytes.
fn pack(target: &str) -> Vec<Vec<u8>> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus-min")
        .join(format!("{target}.pack"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut rest = &bytes[..];
    let mut inputs = Vec::new();
    while !rest.is_empty() {
        let (len, tail) = rest.split_at(4);
        let len = u32::from_le_bytes(len.try_into().unwrap()) as usize;
        assert!(
            len <= tail.len(),
            "{target}.pack: record {} cut short",
            inputs.len()
        );
        inputs.push(tail[..len].to_vec());
        rest = &tail[len..];
    }
    inputs
}

fn replay(target: &str, run: fn(&[u8])) {
    let inputs = pack(target);
    assert!(!inputs.is_empty(), "{target}.pack is empty");
    for (i, input) in inputs.iter().enumerate() {
        if catch_unwind(AssertUnwindSafe(|| run(input))).is_err() {
            panic!(
                "fuzz target {target}: corpus input {i} of {} panics ({} bytes: {:?})",
                inputs.len(),
                input.len(),
                String::from_utf8_lossy(&input[..input.len().min(200)])
            );
        }
    }
}

#[test]
fn gguf_parse_corpus() {
    replay("gguf_parse", inputs::gguf_parse);
}

#[test]
fn kv_frame_corpus() {
    replay("kv_frame", inputs::kv_frame);
}

#[test]
fn kv_events_decode_corpus() {
    replay("kv_events_decode", inputs::kv_events_decode);
}

#[test]
fn keys_file_corpus() {
    replay("keys_file", inputs::keys_file);
}

#[test]
fn chat_template_corpus() {
    replay("chat_template", inputs::chat_template);
}

#[test]
fn safetensors_header_corpus() {
    replay("safetensors_header", inputs::safetensors_header);
}

#[test]
fn tokenizer_json_corpus() {
    replay("tokenizer_json", inputs::tokenizer_json);
}

#[test]
fn hf_config_corpus() {
    replay("hf_config", inputs::hf_config);
}

#[test]
fn peft_config_corpus() {
    replay("peft_config", inputs::peft_config);
}

#[test]
fn structured_compile_corpus() {
    replay("structured_compile", inputs::structured_compile);
}

#[test]
fn kv_disk_block_corpus() {
    // The target reads a sound file back (so the campaign reached the read, not only the
    // scan), and any one byte changed in the header or the checksum is refused. With
    // PAGODA_FUZZ_SEED_DIR set, the sound file is written there: the campaign's seed.
    let seed = inputs::kv_disk_seed();
    if let Some(dir) = std::env::var_os("PAGODA_FUZZ_SEED_DIR") {
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(std::path::Path::new(&dir).join("sound.kvb"), &seed).unwrap();
    }
    assert!(
        inputs::kv_disk_block(&seed),
        "a sound block file was not read back"
    );
    for i in [0, 9, 20, 50, 80, 100, seed.len() - 1] {
        let mut bad = seed.clone();
        bad[i] ^= 1;
        assert!(!inputs::kv_disk_block(&bad), "byte {i} changed, still read");
    }
    assert!(!inputs::kv_disk_block(&seed[..seed.len() - 1]));
    replay("kv_disk_block", |d| {
        inputs::kv_disk_block(d);
    });
}

#[test]
fn api_request_corpus() {
    replay("api_request", inputs::api_request);
}
