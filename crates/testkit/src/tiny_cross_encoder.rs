//! A tiny random `BertForSequenceClassification` checkpoint (a cross-encoder): HF's names and
//! layouts written here from transformers' conventions (`bert.*`, the pooler, a one-label
//! `classifier`), F32 safetensors, `config.json`, and a WordPiece `tokenizer.json` copied from
//! a real BERT model so that pairs tokenize as a user's reranker's would; and the query and
//! documents the tests score.

use std::io;
use std::path::Path;

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::json;

use crate::hf_checkpoint::write_safetensors;

/// A query and a dozen documents (several languages, a one-letter one) the tests score.
pub const QUERY: &str = "How do I reset my password?";
pub const DOCUMENTS: [&str; 12] = [
    "I forgot my password and cannot log in.",
    "The stock market fell sharply this morning.",
    "Click 'Forgot password' on the sign-in page to get a reset link.",
    "Photosynthesis converts light energy into chemical energy.",
    "Passwords must be at least twelve characters long.",
    "Le chat dort sur le canapé.",
    "Reset your router by holding the button for ten seconds.",
    "猫在沙发上睡觉。",
    "Contact support if the reset email does not arrive.",
    "A man is playing a guitar.",
    "Your account is locked after five failed attempts.",
    "x",
];

/// The tiny model's shape (the vocabulary is the copied tokenizer's).
pub const HIDDEN: usize = 32;
pub const LAYERS: usize = 2;
pub const HEADS: usize = 4;
pub const FFN: usize = 64;
pub const MAX_POSITIONS: usize = 64;

/// Writes the checkpoint into `dir` with `tokenizer.json` copied from `tokenizer` and a
/// vocabulary of `vocab` rows.
pub fn write(dir: &Path, tokenizer: &Path, vocab: usize, seed: u64) -> io::Result<()> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut t: Vec<(String, Vec<usize>, Vec<f32>)> = Vec::new();
    let mut random = |name: &str, shape: Vec<usize>, centre: f32, spread: f32| {
        let n = shape.iter().product();
        let v = (0..n)
            .map(|_| centre + spread * (rng.random::<f32>() * 2.0 - 1.0))
            .collect();
        t.push((name.to_owned(), shape, v));
    };
    let d = HIDDEN;
    random(
        "bert.embeddings.word_embeddings.weight",
        vec![vocab, d],
        0.0,
        0.5,
    );
    random(
        "bert.embeddings.position_embeddings.weight",
        vec![MAX_POSITIONS, d],
        0.0,
        0.5,
    );
    random(
        "bert.embeddings.token_type_embeddings.weight",
        vec![2, d],
        0.0,
        0.5,
    );
    random("bert.embeddings.LayerNorm.weight", vec![d], 1.0, 0.1);
    random("bert.embeddings.LayerNorm.bias", vec![d], 0.0, 0.1);
    for l in 0..LAYERS {
        let p = format!("bert.encoder.layer.{l}");
        for (m, rows, cols) in [
            ("attention.self.query", d, d),
            ("attention.self.key", d, d),
            ("attention.self.value", d, d),
            ("attention.output.dense", d, d),
            ("intermediate.dense", FFN, d),
            ("output.dense", d, FFN),
        ] {
            random(&format!("{p}.{m}.weight"), vec![rows, cols], 0.0, 0.3);
            random(&format!("{p}.{m}.bias"), vec![rows], 0.0, 0.1);
        }
        for m in ["attention.output.LayerNorm", "output.LayerNorm"] {
            random(&format!("{p}.{m}.weight"), vec![d], 1.0, 0.1);
            random(&format!("{p}.{m}.bias"), vec![d], 0.0, 0.1);
        }
    }
    random("bert.pooler.dense.weight", vec![d, d], 0.0, 0.3);
    random("bert.pooler.dense.bias", vec![d], 0.0, 0.1);
    random("classifier.weight", vec![1, d], 0.0, 1.0);
    random("classifier.bias", vec![1], 0.0, 0.1);
    write_safetensors(&dir.join("model.safetensors"), &t)?;
    let config = json!({
        "architectures": ["BertForSequenceClassification"], "model_type": "bert",
        "hidden_size": d, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
        "intermediate_size": FFN, "vocab_size": vocab, "max_position_embeddings": MAX_POSITIONS,
        "type_vocab_size": 2, "layer_norm_eps": 1e-12, "hidden_act": "gelu",
        "id2label": {"0": "LABEL_0"}, "label2id": {"LABEL_0": 0},
    });
    std::fs::write(dir.join("config.json"), config.to_string())?;
    std::fs::copy(tokenizer, dir.join("tokenizer.json"))?;
    Ok(())
}
