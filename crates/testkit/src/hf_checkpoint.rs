//! A [`TinyModel`] written as a Hugging Face checkpoint directory: tensors under HF's names in
//! HF's layouts (Llama's Q/K rows in HF's half-split RoPE pairing, Gemma's norms as `w - 1`),
//! as F32 safetensors (one file or shards with an index), `config.json`, a byte-level BPE
//! `tokenizer.json` over the tiny vocabulary and a `tokenizer_config.json`. The mapping is
//! written here from transformers' conventions, independently of pagoda-hf's.

use std::io;
use std::path::Path;

use pagoda_kernels::quant::{GgmlType, dequantize_row};
use serde_json::json;

use crate::gguf_writer::Value;
use crate::tiny_model::{TinyArch, TinyModel};

/// HF's name for a GGUF tensor of the tiny models.
fn hf_name(arch: TinyArch, gguf: &str) -> String {
    match gguf {
        "token_embd.weight" => return "model.embed_tokens.weight".into(),
        "output_norm.weight" => return "model.norm.weight".into(),
        "output.weight" => return "lm_head.weight".into(),
        _ => {}
    }
    let rest = gguf.strip_prefix("blk.").unwrap_or(gguf);
    let (layer, rest) = rest.split_once('.').unwrap_or(("0", rest));
    let (module, suffix) = rest.rsplit_once('.').unwrap_or((rest, "weight"));
    let hf = match (module, arch) {
        ("attn_norm", _) => "input_layernorm",
        ("ffn_norm", TinyArch::Llama | TinyArch::Qwen3 | TinyArch::Qwen2) => {
            "post_attention_layernorm"
        }
        ("ffn_norm", TinyArch::Gemma3) => "pre_feedforward_layernorm",
        ("post_attention_norm", _) => "post_attention_layernorm",
        ("post_ffw_norm", _) => "post_feedforward_layernorm",
        ("attn_q_norm", _) => "self_attn.q_norm",
        ("attn_k_norm", _) => "self_attn.k_norm",
        ("attn_q", _) => "self_attn.q_proj",
        ("attn_k", _) => "self_attn.k_proj",
        ("attn_v", _) => "self_attn.v_proj",
        ("attn_output", _) => "self_attn.o_proj",
        ("ffn_gate", _) => "mlp.gate_proj",
        ("ffn_up", _) => "mlp.up_proj",
        ("ffn_down", _) => "mlp.down_proj",
        (other, _) => other,
    };
    format!("model.layers.{layer}.{hf}.{suffix}")
}

/// GGUF rows (RoPE pairs adjacent: rows 2i, 2i+1 of a head) back to HF's order (pair halves
/// `head_dim / 2` rows apart), as transformers stores Llama's Q and K.
pub(crate) fn to_hf_rope_order(values: &[f32], heads: usize, cols: usize) -> Vec<f32> {
    let rows = values.len() / cols;
    let head_dim = rows / heads;
    let half = head_dim / 2;
    let mut out = vec![0.0; values.len()];
    for h in 0..heads {
        for i in 0..half {
            for j in 0..2 {
                let gguf_row = h * head_dim + 2 * i + j;
                let hf_row = h * head_dim + j * half + i;
                out[hf_row * cols..(hf_row + 1) * cols]
                    .copy_from_slice(&values[gguf_row * cols..(gguf_row + 1) * cols]);
            }
        }
    }
    out
}

/// Writes a safetensors file of F32 tensors (name, PyTorch shape, values).
pub fn write_safetensors(
    path: &Path,
    tensors: &[(String, Vec<usize>, Vec<f32>)],
) -> io::Result<()> {
    let mut header = serde_json::Map::new();
    let mut offset = 0usize;
    for (name, shape, values) in tensors {
        let end = offset + 4 * values.len();
        header.insert(
            name.clone(),
            json!({"dtype": "F32", "shape": shape, "data_offsets": [offset, end]}),
        );
        offset = end;
    }
    header.insert("__metadata__".into(), json!({"format": "pt"}));
    let mut text = serde_json::Value::Object(header).to_string();
    while !(8 + text.len()).is_multiple_of(8) {
        text.push(' ');
    }
    let mut bytes = (text.len() as u64).to_le_bytes().to_vec();
    bytes.extend(text.as_bytes());
    for (_, _, values) in tensors {
        bytes.extend(values.iter().flat_map(|v| v.to_le_bytes()));
    }
    std::fs::write(path, bytes)
}

/// The tiny model's tensors in HF's names and layouts.
fn hf_tensors(spec: &TinyModel) -> Vec<(String, Vec<usize>, Vec<f32>)> {
    let writer = spec.writer();
    let mut out = Vec::new();
    for t in writer.tensors() {
        let ty = GgmlType::from_id(t.type_id).expect("tiny models use known types");
        let cols = t.dims[0] as usize;
        let n: usize = t.dims.iter().product::<u64>() as usize;
        let mut values = vec![0f32; n];
        let row_bytes = t.data.len() / (n / cols);
        for (src, dst) in t
            .data
            .chunks_exact(row_bytes)
            .zip(values.chunks_exact_mut(cols))
        {
            dequantize_row(ty, src, dst);
        }
        if spec.arch == TinyArch::Llama && t.name.contains(".attn_q.") {
            values = to_hf_rope_order(&values, spec.n_heads, cols);
        }
        if spec.arch == TinyArch::Llama && t.name.contains(".attn_k.") {
            values = to_hf_rope_order(&values, spec.n_kv_heads, cols);
        }
        if spec.arch == TinyArch::Gemma3 && t.name.ends_with("norm.weight") {
            values.iter_mut().for_each(|v| *v -= 1.0);
        }
        let shape = t.dims.iter().rev().map(|&d| d as usize).collect();
        out.push((hf_name(spec.arch, &t.name), shape, values));
    }
    out
}

/// Writes `spec` into `dir` as a checkpoint of `shards` safetensors files (an index when > 1).
pub fn write(spec: &TinyModel, dir: &Path, shards: usize) -> io::Result<()> {
    let tensors = hf_tensors(spec);
    if shards <= 1 {
        write_safetensors(&dir.join("model.safetensors"), &tensors)?;
    } else {
        let mut weight_map = serde_json::Map::new();
        let per = tensors.len().div_ceil(shards);
        for (i, part) in tensors.chunks(per).enumerate() {
            let name = format!("model-{:05}-of-{shards:05}.safetensors", i + 1);
            write_safetensors(&dir.join(&name), part)?;
            for (t, _, _) in part {
                weight_map.insert(t.clone(), json!(name));
            }
        }
        let index = json!({"metadata": {}, "weight_map": weight_map});
        std::fs::write(dir.join("model.safetensors.index.json"), index.to_string())?;
    }
    let mut config = match spec.arch {
        TinyArch::Llama if spec.sliding_window > 0 => json!({
            "architectures": ["MistralForCausalLM"], "model_type": "mistral",
            "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": true,
            "sliding_window": spec.sliding_window,
        }),
        TinyArch::Llama => json!({
            "architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": true,
        }),
        TinyArch::Qwen2 => json!({
            "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
            "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": true,
        }),
        TinyArch::Qwen3 => json!({
            "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
            "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": true,
        }),
        TinyArch::Gemma3 => json!({
            "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
            "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "sliding_window": spec.sliding_window,
        }),
    };
    for (k, v) in [
        ("hidden_size", spec.d_model),
        ("num_hidden_layers", spec.n_layers),
        ("intermediate_size", spec.ffn_dim),
        ("num_attention_heads", spec.n_heads),
        ("num_key_value_heads", spec.n_kv_heads),
        ("head_dim", spec.head_dim),
        ("vocab_size", spec.vocab_size),
        ("max_position_embeddings", spec.context_length),
    ] {
        config[k] = json!(v);
    }
    std::fs::write(dir.join("config.json"), config.to_string())?;

    let writer = spec.writer();
    let tokens: Vec<String> = match writer.value("tokenizer.ggml.tokens") {
        Some(Value::Array(_, items)) => items
            .iter()
            .map(|v| match v {
                Value::String(s) => s.clone(),
                _ => String::new(),
            })
            .collect(),
        _ => Vec::new(),
    };
    let vocab: serde_json::Map<String, serde_json::Value> = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), json!(i)))
        .collect();
    // The tiny vocabularies put their special tokens first.
    let added: Vec<serde_json::Value> = tokens
        .iter()
        .take(4)
        .enumerate()
        .map(|(i, t)| json!({"id": i, "content": t, "special": true}))
        .collect();
    let tokenizer = json!({
        "added_tokens": added,
        "pre_tokenizer": {"type": "ByteLevel"},
        "model": {"type": "BPE", "vocab": vocab, "merges": []},
    });
    std::fs::write(dir.join("tokenizer.json"), tokenizer.to_string())?;
    let tokenizer_config = json!({
        "eos_token": tokens.get(2),
        "chat_template": "{% for m in messages %}{{ m['content'] }}{% endfor %}",
    });
    std::fs::write(
        dir.join("tokenizer_config.json"),
        tokenizer_config.to_string(),
    )
}
