//! `tokenizer.json` (+ `tokenizer_config.json`) onto GGUF's `tokenizer.ggml.*` keys, as
//! convert_hf_to_gguf.py does for byte-level BPE vocabularies (Llama 3, Qwen2, SmolLM): the
//! vocabulary by id with added tokens (special ones as control tokens), the merges, the
//! pre-tokenizer recognised from its regex, BOS/EOS and the chat template.

use pagoda_gguf::{GgufAssembly, MetaArray, MetaValue};
use serde_json::Value;

use crate::HfError;

/// GGUF token types (gguf-py `TokenType`).
const NORMAL: i32 = 1;
const CONTROL: i32 = 3;
const USER_DEFINED: i32 = 4;
const UNUSED: i32 = 5;

fn err(message: impl Into<String>) -> HfError {
    HfError::Tokenizer(message.into())
}

/// The GGUF `tokenizer.ggml.pre` of a byte-level BPE pre-tokenizer, told by its split regex
/// (the digit rule is what differs: `\p{N}{1,3}` for Llama 3, one digit for Qwen2, isolated
/// digits by a `Digits` step for SmolLM), `gpt2` when there is no regex of its own.
fn pre_tokenizer_name(pre: &Value) -> &'static str {
    let text = pre.to_string();
    if text.contains(r"\\p{N}{1,3}") {
        "llama-bpe"
    } else if text.contains(r"[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}") {
        "qwen2"
    } else if text.contains("\"Digits\"") {
        "smollm"
    } else {
        "gpt2"
    }
}

/// A token given as a string or as `{"content": ...}` (tokenizer_config.json's two forms).
fn token_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("content").and_then(Value::as_str).map(str::to_owned),
        _ => None,
    }
}

/// Writes the tokenizer keys for `vocab_size` embedding rows into `out`.
pub fn add_tokenizer(
    out: &mut GgufAssembly,
    tokenizer_json: &str,
    tokenizer_config: Option<&str>,
    vocab_size: usize,
) -> Result<(), HfError> {
    let tj: Value =
        serde_json::from_str(tokenizer_json).map_err(|e| err(format!("tokenizer.json: {e}")))?;
    let model = &tj["model"];
    if model["type"].as_str() != Some("BPE") {
        return Err(err(format!(
            "tokenizer.json model type {} (pagoda converts byte-level BPE vocabularies)",
            model["type"]
        )));
    }
    let vocab = model["vocab"]
        .as_object()
        .ok_or_else(|| err("tokenizer.json: model.vocab is not an object"))?;
    let added = tj["added_tokens"].as_array().cloned().unwrap_or_default();
    let max_id = vocab
        .values()
        .filter_map(Value::as_u64)
        .chain(added.iter().filter_map(|t| t["id"].as_u64()))
        .max()
        .ok_or_else(|| err("tokenizer.json: empty vocabulary"))? as usize;
    let n = vocab_size.max(max_id + 1);
    if n > vocab_size {
        return Err(err(format!(
            "token id {max_id} does not fit the {vocab_size} embedding rows"
        )));
    }
    let mut tokens: Vec<Option<String>> = vec![None; n];
    let mut types = vec![NORMAL; n];
    for (text, id) in vocab {
        let id = id
            .as_u64()
            .ok_or_else(|| err(format!("token {text:?}: id is not a number")))?
            as usize;
        tokens[id] = Some(text.clone());
    }
    for t in &added {
        let (Some(id), Some(text)) = (t["id"].as_u64(), t["content"].as_str()) else {
            return Err(err("tokenizer.json: an added token without id or content"));
        };
        let id = id as usize;
        tokens[id] = Some(text.to_owned());
        types[id] = if t["special"].as_bool() == Some(true) {
            CONTROL
        } else {
            USER_DEFINED
        };
    }
    // Rows the vocabulary leaves unnamed (padding to a round embedding size), as the converter.
    let tokens: Vec<String> = tokens
        .into_iter()
        .enumerate()
        .map(|(i, t)| {
            t.unwrap_or_else(|| {
                types[i] = UNUSED;
                format!("[PAD{i}]")
            })
        })
        .collect();
    let merges: Vec<String> = model["merges"]
        .as_array()
        .map(|m| {
            m.iter()
                .filter_map(|m| match m {
                    Value::String(s) => Some(s.clone()),
                    Value::Array(p) => {
                        Some(format!("{} {}", p.first()?.as_str()?, p.get(1)?.as_str()?))
                    }
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    let id_of = |text: &str| tokens.iter().position(|t| t == text).map(|i| i as u32);

    out.kv("tokenizer.ggml.model", MetaValue::String("gpt2".into()));
    out.kv(
        "tokenizer.ggml.pre",
        MetaValue::String(pre_tokenizer_name(&tj["pre_tokenizer"]).into()),
    );
    out.kv(
        "tokenizer.ggml.tokens",
        MetaValue::Array(MetaArray::Str(tokens.clone())),
    );
    out.kv(
        "tokenizer.ggml.token_type",
        MetaValue::Array(MetaArray::I32(types)),
    );
    out.kv(
        "tokenizer.ggml.merges",
        MetaValue::Array(MetaArray::Str(merges)),
    );

    let config: Value = match tokenizer_config {
        Some(text) => {
            serde_json::from_str(text).map_err(|e| err(format!("tokenizer_config.json: {e}")))?
        }
        None => Value::Null,
    };
    for (field, key) in [
        ("bos_token", "tokenizer.ggml.bos_token_id"),
        ("eos_token", "tokenizer.ggml.eos_token_id"),
        ("pad_token", "tokenizer.ggml.padding_token_id"),
    ] {
        if let Some(id) = config
            .get(field)
            .and_then(token_text)
            .and_then(|t| id_of(&t))
        {
            out.kv(key, MetaValue::U32(id));
        }
    }
    let add_bos = config["add_bos_token"].as_bool().unwrap_or(false);
    out.kv("tokenizer.ggml.add_bos_token", MetaValue::Bool(add_bos));
    let template = match &config["chat_template"] {
        Value::String(s) => Some(s.clone()),
        // A list of named templates: the default one.
        Value::Array(list) => list
            .iter()
            .find(|t| t["name"].as_str() == Some("default"))
            .and_then(|t| t["template"].as_str())
            .map(str::to_owned),
        _ => None,
    };
    if let Some(t) = template {
        out.kv("tokenizer.chat_template", MetaValue::String(t));
    }
    Ok(())
}
