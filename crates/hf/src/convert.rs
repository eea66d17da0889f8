//! A checkpoint directory into an in-memory GGUF: `config.json` to the architecture's
//! metadata keys, each tensor renamed, transformed (RoPE pairing, Gemma norms), transposed
//! into GGUF's dims and quantized in situ, and the tokenizer's keys.

use std::path::Path;

use pagoda_gguf::{GgmlType, GgufAssembly, GgufFile, MetaValue};

use crate::checkpoint::Checkpoint;
use crate::config::Arch;
use crate::matrix_bytes::matrix_bytes;
use crate::sentence_transformers::add_modules;
use crate::tensor_names::{Transform, gguf_name, rope_permute_rows};
use crate::tokenizer_json::add_tokenizer;
use crate::{HfConfig, HfError, Quantization};

/// Reads the checkpoint in `dir` and returns it as a GGUF file whose matrices are of the
/// types `quantization` picks.
pub fn convert(dir: &Path, quantization: Quantization) -> Result<GgufFile, HfError> {
    let ckpt = Checkpoint::open(dir)?;
    let cfg = &ckpt.config;
    cfg.check()?;
    let arch = cfg.arch()?;
    let mut out = GgufAssembly::new();
    add_metadata(&mut out, cfg, arch);
    add_tensors(&mut out, &ckpt, arch, quantization)?;
    if arch == Arch::BertCrossEncoder {
        crate::cross_encoder::add_head(&mut out, &ckpt, arch.gguf_name())?;
        return Ok(out.finish());
    }
    if arch.is_encoder() {
        // Encoders tokenize with tokenizer.json itself (WordPiece), not GGUF tokenizer keys.
        // EmbeddingGemma's config.json does not list its Matryoshka lengths; its model card
        // does (768 cut to 512, 256 or 128, then re-normalised).
        let matryoshka = (arch == Arch::GemmaEmbedding).then_some(&[768, 512, 256, 128][..]);
        add_modules(
            &mut out,
            dir,
            arch.gguf_name(),
            cfg.max_position_embeddings,
            quantization,
            matryoshka,
        )?;
        return Ok(out.finish());
    }

    let tokenizer = ckpt
        .read_optional("tokenizer.json")?
        .ok_or_else(|| HfError::Tokenizer(format!("{} has no tokenizer.json", dir.display())))?;
    let tokenizer_config = ckpt.read_optional("tokenizer_config.json")?;
    add_tokenizer(
        &mut out,
        &tokenizer,
        tokenizer_config.as_deref(),
        cfg.vocab_size,
    )?;
    if let Some(template) = ckpt.read_optional("chat_template.jinja")? {
        out.kv("tokenizer.chat_template", MetaValue::String(template));
    }
    Ok(out.finish())
}

/// The first id of a `bos_token_id` / `eos_token_id` that is a number or a list of them.
fn first_id(v: &Option<serde_json::Value>) -> Option<u32> {
    match v.as_ref()? {
        serde_json::Value::Array(a) => a.first()?.as_u64().map(|x| x as u32),
        other => other.as_u64().map(|x| x as u32),
    }
}

fn add_metadata(out: &mut GgufAssembly, cfg: &HfConfig, arch: Arch) {
    let a = arch.gguf_name();
    let u32v = |v: usize| MetaValue::U32(v as u32);
    out.kv("general.architecture", MetaValue::String(a.into()));
    out.kv(
        "general.name",
        MetaValue::String(cfg.architectures.first().cloned().unwrap_or_default()),
    );
    out.kv(
        &format!("{a}.context_length"),
        u32v(cfg.max_position_embeddings),
    );
    out.kv(&format!("{a}.embedding_length"), u32v(cfg.hidden_size));
    out.kv(&format!("{a}.block_count"), u32v(cfg.num_hidden_layers));
    out.kv(
        &format!("{a}.feed_forward_length"),
        u32v(cfg.intermediate_size),
    );
    out.kv(
        &format!("{a}.attention.head_count"),
        u32v(cfg.num_attention_heads),
    );
    out.kv(
        &format!("{a}.attention.head_count_kv"),
        u32v(cfg.n_kv_heads()),
    );
    out.kv(&format!("{a}.attention.key_length"), u32v(cfg.head_dim()));
    out.kv(&format!("{a}.attention.value_length"), u32v(cfg.head_dim()));
    out.kv(&format!("{a}.rope.dimension_count"), u32v(cfg.head_dim()));
    if arch.is_bert() {
        let eps = cfg.layer_norm_eps.unwrap_or(1e-12);
        out.kv(
            &format!("{a}.attention.layer_norm_epsilon"),
            MetaValue::F32(eps),
        );
        out.kv(&format!("{a}.attention.causal"), MetaValue::Bool(false));
        return;
    }
    let eps = cfg
        .rms_norm_eps
        .unwrap_or(if arch.is_gemma() { 1e-6 } else { 1e-5 });
    out.kv(
        &format!("{a}.attention.layer_norm_rms_epsilon"),
        MetaValue::F32(eps),
    );
    let theta = cfg.rope_theta.unwrap_or(if arch.is_gemma() {
        1_000_000.0
    } else {
        10_000.0
    });
    out.kv(&format!("{a}.rope.freq_base"), MetaValue::F32(theta));
    if let Some(w) = cfg.effective_sliding_window(arch) {
        out.kv(&format!("{a}.attention.sliding_window"), u32v(w));
    }
    if arch == Arch::GemmaEmbedding {
        // The encoder tokenizes with tokenizer.json, so the file carries only the vocabulary's
        // size, and says its attention is bidirectional.
        out.kv(&format!("{a}.attention.causal"), MetaValue::Bool(false));
        out.kv(&format!("{a}.vocab_size"), u32v(cfg.vocab_size));
    }
    if let Some(id) = first_id(&cfg.bos_token_id) {
        out.kv("tokenizer.ggml.bos_token_id", MetaValue::U32(id));
    }
    if let Some(id) = first_id(&cfg.eos_token_id) {
        out.kv("tokenizer.ggml.eos_token_id", MetaValue::U32(id));
    }
}

fn add_tensors(
    out: &mut GgufAssembly,
    ckpt: &Checkpoint,
    arch: Arch,
    quantization: Quantization,
) -> Result<(), HfError> {
    let cfg = &ckpt.config;
    let mut names: Vec<&str> = ckpt.names().collect();
    names.sort();
    let mut has_output = false;
    for name in names {
        let Some((gguf, transform)) =
            gguf_name(arch, name, cfg.num_attention_heads, cfg.n_kv_heads())
        else {
            continue;
        };
        if let Some(dtype) = ckpt.unsupported_dtype(name) {
            return Err(HfError::BadTensor {
                name: name.to_owned(),
                detail: format!("dtype {dtype} (pagoda reads F32, F16, BF16)"),
            });
        }
        if gguf == "output.weight" {
            if cfg.tied(arch) {
                continue;
            }
            has_output = true;
        }
        let view = ckpt
            .tensor(name)
            .ok_or_else(|| HfError::MissingTensor(name.to_owned()))?;
        let bad = |detail: String| HfError::BadTensor {
            name: name.to_owned(),
            detail,
        };
        // PyTorch shapes are outermost first; GGUF dims are innermost (ne0) first.
        let (rows, cols) = match view.shape {
            [n] => (1, *n),
            [r, c] => (*r, *c),
            other => {
                return Err(bad(format!(
                    "shape {other:?}: pagoda reads 1-D and 2-D tensors"
                )));
            }
        };
        let dims: Vec<u64> = if view.shape.len() == 1 {
            vec![cols as u64]
        } else {
            vec![cols as u64, rows as u64]
        };
        let ty = if view.shape.len() == 1 {
            GgmlType::F32
        } else {
            quantization.matrix_type(view.dtype, cols)
        };
        let keep_bytes = transform == Transform::None
            && matches!(
                (ty, view.dtype),
                (GgmlType::F32, crate::Dtype::F32)
                    | (GgmlType::F16, crate::Dtype::F16)
                    | (GgmlType::BF16, crate::Dtype::BF16)
            );
        if keep_bytes {
            out.tensor(&gguf, &dims, ty, view.bytes)?;
            continue;
        }
        let mut values = view.to_f32();
        match transform {
            Transform::None => {}
            Transform::AddOne => values.iter_mut().for_each(|v| *v += 1.0),
            Transform::RopePermute { heads } => {
                if rows % heads != 0 || (rows / heads) % 2 != 0 {
                    return Err(bad(format!(
                        "{rows} rows do not split into {heads} heads of pairs"
                    )));
                }
                // A bias is one column of the same rows.
                let width = if view.shape.len() == 1 { 1 } else { cols };
                values = rope_permute_rows(&values, heads, width);
            }
        }
        let bytes = matrix_bytes(ty, &values, cols)
            .map_err(|_| bad(format!("{cols} columns are not whole {ty} blocks")))?;
        out.tensor(&gguf, &dims, ty, &bytes)?;
    }
    if !arch.is_encoder() && !cfg.tied(arch) && !has_output {
        return Err(HfError::MissingTensor("lm_head.weight".to_owned()));
    }
    Ok(())
}
