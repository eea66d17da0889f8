//! A `BertForSequenceClassification` checkpoint's head as GGUF metadata: llama.cpp's RANK
//! pooling (the [CLS] state through the pooler and the classifier, `cls.*` tensors), one label
//! (the relevance logit), and the model's length. A cross-encoder has no sentence-transformers
//! modules: no Dense, no normalisation, no prompts.

use pagoda_gguf::{GgufAssembly, MetaValue};

use crate::HfError;
use crate::checkpoint::Checkpoint;

/// llama.cpp's `LLAMA_POOLING_TYPE_RANK`.
pub const POOLING_RANK: u32 = 4;

/// Checks the head of the cross-encoder `ckpt` and adds its keys.
pub fn add_head(out: &mut GgufAssembly, ckpt: &Checkpoint, arch: &str) -> Result<(), HfError> {
    for name in ["bert.pooler.dense.weight", "classifier.weight"] {
        if ckpt.tensor(name).is_none() {
            return Err(HfError::MissingTensor(name.to_owned()));
        }
    }
    let labels = ckpt
        .tensor("classifier.weight")
        .and_then(|t| t.shape.first().copied())
        .unwrap_or(0);
    if labels != 1 {
        // Several labels are a classifier's classes, not one relevance score.
        return Err(HfError::Config(format!(
            "num_labels {labels}: pagoda scores pairs with one-label cross-encoders"
        )));
    }
    let cfg = &ckpt.config;
    out.kv(
        &format!("{arch}.pooling_type"),
        MetaValue::U32(POOLING_RANK),
    );
    out.kv("pagoda.embedding.normalize", MetaValue::Bool(false));
    out.kv(
        "pagoda.embedding.max_seq_length",
        MetaValue::U32(cfg.max_position_embeddings as u32),
    );
    out.kv("pagoda.embedding.dense_count", MetaValue::U32(0));
    Ok(())
}
