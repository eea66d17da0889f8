//! A sentence-transformers directory's modules after the transformer (`modules.json`): the
//! pooling (`1_Pooling/config.json`), optional `Dense` projections with their own safetensors
//! and `Normalize`, plus `sentence_bert_config.json`'s `max_seq_length` and the prompts
//! (`prompts.rs`). Written into the GGUF as llama.cpp's `{arch}.pooling_type` and pagoda's
//! `pagoda.embedding.*` keys and `dense.{i}.*` tensors, so the encoder reads them the way it
//! reads everything else.

use std::path::Path;

use pagoda_gguf::{GgmlType, GgufAssembly, MetaValue};
use serde::Deserialize;

use crate::safetensors::SafetensorsFile;
use crate::{HfError, Quantization};

/// llama.cpp's `enum llama_pooling_type` values.
pub const POOLING_MEAN: u32 = 1;
pub const POOLING_CLS: u32 = 2;
pub const POOLING_LAST: u32 = 3;

#[derive(Deserialize)]
struct Module {
    path: String,
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Deserialize)]
struct PoolingConfig {
    #[serde(default)]
    pooling_mode_cls_token: bool,
    #[serde(default)]
    pooling_mode_mean_tokens: bool,
    #[serde(default)]
    pooling_mode_lasttoken: bool,
    /// Whether a prompt's tokens count in the pooling (sentence-transformers' default).
    #[serde(default = "yes")]
    include_prompt: bool,
}

#[derive(Deserialize)]
struct DenseConfig {
    in_features: usize,
    out_features: usize,
    #[serde(default = "yes")]
    bias: bool,
    #[serde(default)]
    activation_function: String,
}

fn yes() -> bool {
    true
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, HfError> {
    let text = crate::read_text::read_text(path)?;
    serde_json::from_str(&text).map_err(|e| HfError::BadFile {
        path: path.to_owned(),
        message: e.to_string(),
    })
}

/// Adds the modules of the sentence-transformers directory `dir` (mean pooling and no
/// normalization when it has no `modules.json`, as transformers' plain models are used).
/// `matryoshka_default` is the architecture's lengths when config.json lists none.
pub fn add_modules(
    out: &mut GgufAssembly,
    dir: &Path,
    arch: &str,
    max_positions: usize,
    quantization: Quantization,
    matryoshka_default: Option<&[u32]>,
) -> Result<(), HfError> {
    let mut pooling = POOLING_MEAN;
    let mut normalize = false;
    let mut dense = 0usize;
    let mut include_prompt = true;
    let modules_path = dir.join("modules.json");
    let modules: Vec<Module> = if modules_path.is_file() {
        read_json(&modules_path)?
    } else {
        Vec::new()
    };
    for m in &modules {
        let kind = m.kind.rsplit('.').next().unwrap_or(&m.kind);
        let mdir = dir.join(&m.path);
        match kind {
            "Transformer" => {}
            "Pooling" => {
                let c: PoolingConfig = read_json(&mdir.join("config.json"))?;
                include_prompt = c.include_prompt;
                pooling = match (
                    c.pooling_mode_mean_tokens,
                    c.pooling_mode_cls_token,
                    c.pooling_mode_lasttoken,
                ) {
                    (true, false, false) => POOLING_MEAN,
                    (false, true, false) => POOLING_CLS,
                    (false, false, true) => POOLING_LAST,
                    _ => {
                        return Err(HfError::Config(format!(
                            "{}: pagoda pools by mean, CLS or last token, one of them",
                            m.path
                        )));
                    }
                };
            }
            "Dense" => {
                let c: DenseConfig = read_json(&mdir.join("config.json"))?;
                let act = c.activation_function.rsplit('.').next().unwrap_or("");
                if !matches!(act, "" | "Identity") {
                    return Err(HfError::Config(format!(
                        "{}: Dense activation {} is not supported",
                        m.path, c.activation_function
                    )));
                }
                let st = SafetensorsFile::open(&mdir.join("model.safetensors"))?;
                let w = st
                    .tensor("linear.weight")
                    .ok_or_else(|| HfError::MissingTensor(format!("{}/linear.weight", m.path)))?;
                if w.shape != [c.out_features, c.in_features] {
                    return Err(HfError::BadTensor {
                        name: format!("{}/linear.weight", m.path),
                        detail: format!(
                            "shape {:?}, config says {} x {}",
                            w.shape, c.out_features, c.in_features
                        ),
                    });
                }
                let ty = quantization.matrix_type(w.dtype, c.in_features);
                let bytes = crate::matrix_bytes::matrix_bytes(ty, &w.to_f32(), c.in_features)?;
                let dims = [c.in_features as u64, c.out_features as u64];
                out.tensor(&format!("dense.{dense}.weight"), &dims, ty, &bytes)?;
                if c.bias {
                    let b = st
                        .tensor("linear.bias")
                        .ok_or_else(|| HfError::MissingTensor(format!("{}/linear.bias", m.path)))?;
                    let bytes: Vec<u8> = b.to_f32().iter().flat_map(|v| v.to_le_bytes()).collect();
                    out.tensor(
                        &format!("dense.{dense}.bias"),
                        &[c.out_features as u64],
                        GgmlType::F32,
                        &bytes,
                    )?;
                }
                dense += 1;
            }
            "Normalize" => normalize = true,
            other => {
                return Err(HfError::Config(format!(
                    "modules.json: module {other} is not supported"
                )));
            }
        }
    }
    let mut max_seq = max_positions;
    let sbert = dir.join("sentence_bert_config.json");
    if sbert.is_file() {
        let v: serde_json::Value = read_json(&sbert)?;
        if let Some(m) = v["max_seq_length"].as_u64() {
            max_seq = max_seq.min(m as usize);
        }
    }
    // Matryoshka models list the lengths they were trained to be cut to (vLLM reads the same
    // key from config.json).
    let config: serde_json::Value = read_json(&dir.join("config.json"))?;
    let dims: Option<Vec<u32>> = match config["matryoshka_dimensions"].as_array() {
        Some(dims) => Some(
            dims.iter()
                .filter_map(|d| d.as_u64())
                .map(|d| d as u32)
                .collect(),
        ),
        None => matryoshka_default.map(<[u32]>::to_vec),
    };
    if let Some(dims) = dims {
        out.kv(
            "pagoda.embedding.matryoshka_dimensions",
            MetaValue::Array(pagoda_gguf::MetaArray::U32(dims)),
        );
    }
    out.kv(&format!("{arch}.pooling_type"), MetaValue::U32(pooling));
    out.kv("pagoda.embedding.normalize", MetaValue::Bool(normalize));
    out.kv(
        "pagoda.embedding.max_seq_length",
        MetaValue::U32(max_seq as u32),
    );
    out.kv("pagoda.embedding.dense_count", MetaValue::U32(dense as u32));
    if !include_prompt {
        // The pooling leaves a prompt's tokens out, which pagoda's does not do: a server
        // refuses prompts for such a model rather than pool them in.
        out.kv(
            "pagoda.embedding.pooling_include_prompt",
            MetaValue::Bool(false),
        );
    }
    crate::prompts::add_prompts(out, crate::prompts::read_prompts(dir)?);
    Ok(())
}
