//! A checkpoint directory written from a tiny random GGUF (tensors renamed to Hugging Face's
//! names, Llama's Q/K rows put back in HF's RoPE pairing, Gemma's norms stored as `w - 1`,
//! one safetensors file or two shards with an index) converts back into the same model:
//! unquantized it gives the logits of the GGUF's weights in f32, with in-situ Q8_0 the same
//! greedy tokens within Q8_0's error.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use pagoda_gguf::{GgmlType, GgufAssembly, GgufFile, MetaArray, MetaValue};
use pagoda_hf::{Quantization, convert, rope_unpermute_rows};
use pagoda_kernels::quant::dequantize_row;
use pagoda_model::{CpuExecutor, ForwardBatch, Logits, Model, SeqChunk};
use pagoda_testkit::tiny_model::{TinyArch, TinyModel};
use serde_json::json;

fn dequantized(file: &GgufFile, name: &str) -> Vec<f32> {
    let t = file.tensor(name).unwrap();
    let cols = t.dims[0] as usize;
    let n = t.n_elements() as usize;
    let mut out = vec![0f32; n];
    let row_bytes = t.ty.row_bytes(cols).unwrap();
    for (src, dst) in file
        .tensor_data(t)
        .chunks_exact(row_bytes)
        .zip(out.chunks_exact_mut(cols))
    {
        dequantize_row(t.ty, src, dst);
    }
    out
}

/// The same file with every tensor dequantized to F32: the reference the conversion of an
/// unquantized checkpoint must match.
fn f32_copy(file: &GgufFile) -> GgufFile {
    let mut out = GgufAssembly::new();
    for (k, v) in file.metadata() {
        out.kv(k, v.clone());
    }
    for t in file.tensors() {
        let bytes: Vec<u8> = dequantized(file, &t.name)
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        out.tensor(&t.name, &t.dims, GgmlType::F32, &bytes).unwrap();
    }
    out.finish()
}

/// HF's name for a GGUF tensor (written here independently of pagoda-hf's own table).
fn hf_name(arch: TinyArch, gguf: &str) -> String {
    match gguf {
        "token_embd.weight" => return "model.embed_tokens.weight".into(),
        "output_norm.weight" => return "model.norm.weight".into(),
        "output.weight" => return "lm_head.weight".into(),
        _ => {}
    }
    let rest = gguf.strip_prefix("blk.").unwrap();
    let (layer, rest) = rest.split_once('.').unwrap();
    let (module, suffix) = rest.rsplit_once('.').unwrap();
    let hf = match (module, arch) {
        ("attn_norm", _) => "input_layernorm",
        ("ffn_norm", TinyArch::Llama) => "post_attention_layernorm",
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
        other => panic!("no HF name for {other:?}"),
    };
    format!("model.layers.{layer}.{hf}.{suffix}")
}

/// Writes a safetensors file of F32 tensors (name, PyTorch shape, values).
fn write_safetensors(path: &Path, tensors: &[(String, Vec<usize>, Vec<f32>)]) {
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
    let mut text = serde_json::to_string(&header).unwrap();
    while !(8 + text.len()).is_multiple_of(8) {
        text.push(' ');
    }
    let mut bytes = (text.len() as u64).to_le_bytes().to_vec();
    bytes.extend(text.as_bytes());
    for (_, _, values) in tensors {
        bytes.extend(values.iter().flat_map(|v| v.to_le_bytes()));
    }
    std::fs::write(path, bytes).unwrap();
}

fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pagoda-hf-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Writes `spec` as a Hugging Face checkpoint into `dir` (`shards` safetensors files).
fn write_checkpoint(spec: &TinyModel, file: &GgufFile, dir: &Path, shards: usize) {
    let arch = spec.arch;
    let mut tensors = Vec::new();
    for t in file.tensors() {
        let mut values = dequantized(file, &t.name);
        let cols = t.dims[0] as usize;
        let shape: Vec<usize> = t.dims.iter().rev().map(|&d| d as usize).collect();
        if arch == TinyArch::Llama && t.name.contains("attn_q.") {
            values = rope_unpermute_rows(&values, spec.n_heads, cols);
        }
        if arch == TinyArch::Llama && t.name.contains("attn_k.") {
            values = rope_unpermute_rows(&values, spec.n_kv_heads, cols);
        }
        if arch == TinyArch::Gemma3 && t.name.ends_with("norm.weight") {
            values.iter_mut().for_each(|v| *v -= 1.0);
        }
        tensors.push((hf_name(arch, &t.name), shape, values));
    }
    if shards == 1 {
        write_safetensors(&dir.join("model.safetensors"), &tensors);
    } else {
        let mut weight_map = serde_json::Map::new();
        let per = tensors.len().div_ceil(shards);
        for (i, part) in tensors.chunks(per).enumerate() {
            let name = format!("model-{:05}-of-{shards:05}.safetensors", i + 1);
            write_safetensors(&dir.join(&name), part);
            for (t, _, _) in part {
                weight_map.insert(t.clone(), json!(name));
            }
        }
        let index = json!({"metadata": {}, "weight_map": weight_map});
        std::fs::write(dir.join("model.safetensors.index.json"), index.to_string()).unwrap();
    }
    let config = match arch {
        TinyArch::Llama => json!({
            "architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": true,
        }),
        TinyArch::Gemma3 => json!({
            "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
            "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "sliding_window": spec.sliding_window,
        }),
    };
    let mut config = config.as_object().unwrap().clone();
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
        config.insert(k.into(), json!(v));
    }
    std::fs::write(
        dir.join("config.json"),
        serde_json::Value::Object(config).to_string(),
    )
    .unwrap();
    let Some(MetaValue::Array(MetaArray::Str(tokens))) = file.get("tokenizer.ggml.tokens") else {
        panic!("tiny model without tokens");
    };
    let vocab: serde_json::Map<String, serde_json::Value> = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), json!(i)))
        .collect();
    let tokenizer = json!({
        "added_tokens": [{"id": 1, "content": tokens[1], "special": true}],
        "pre_tokenizer": {"type": "ByteLevel"},
        "model": {"type": "BPE", "vocab": vocab, "merges": []},
    });
    std::fs::write(dir.join("tokenizer.json"), tokenizer.to_string()).unwrap();
    let tokenizer_config = json!({"eos_token": tokens[1], "chat_template": "{{ messages }}"});
    std::fs::write(
        dir.join("tokenizer_config.json"),
        tokenizer_config.to_string(),
    )
    .unwrap();
}

/// Every position's logits of `tokens` in one step.
fn logits(model: Model, tokens: &[u32]) -> Vec<f32> {
    let mut exec = CpuExecutor::new(model, 8, 16).unwrap();
    let table: Vec<u32> = (0..8).collect();
    let batch = ForwardBatch::from_seqs(
        &[SeqChunk {
            tokens,
            start: 0,
            block_table: &table,
            logits: Logits::All,
        }],
        16,
    );
    exec.forward(&batch).unwrap().to_vec()
}

fn argmaxes(logits: &[f32], vocab: usize) -> Vec<usize> {
    logits
        .chunks_exact(vocab)
        .map(|row| {
            (0..vocab)
                .max_by(|&a, &b| row[a].total_cmp(&row[b]))
                .unwrap()
        })
        .collect()
}

/// `n` greedy tokens after `prompt`.
fn greedy(file: &Arc<GgufFile>, prompt: &[u32], n: usize) -> Vec<u32> {
    let mut tokens = prompt.to_vec();
    for _ in 0..n {
        let l = logits(Model::load(Arc::clone(file)).unwrap(), &tokens);
        let vocab = l.len() / tokens.len();
        tokens.push(*argmaxes(&l, vocab).last().unwrap() as u32);
    }
    tokens[prompt.len()..].to_vec()
}

fn check(spec: TinyModel, shards: usize) {
    let tag = format!("{:?}-{shards}", spec.arch);
    let gguf = GgufFile::from_bytes(spec.to_bytes()).unwrap();
    let dir = scratch(&tag);
    write_checkpoint(&spec, &gguf, &dir, shards);
    let reference = Arc::new(f32_copy(&gguf));
    let prompt: Vec<u32> = (0..12).map(|i| 5 + (i * 37) % 240).collect();

    let plain = Arc::new(convert(&dir, Quantization::None).unwrap());
    for t in plain.tensors().iter().filter(|t| t.dims.len() == 2) {
        assert_eq!(t.ty, GgmlType::F32, "{tag}: {} kept as f32", t.name);
    }
    let want = logits(Model::load(Arc::clone(&reference)).unwrap(), &prompt);
    let got = logits(Model::load(Arc::clone(&plain)).unwrap(), &prompt);
    let diff = want
        .iter()
        .zip(&got)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max);
    let mag = want.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    assert!(
        diff <= 1e-5 * mag,
        "{tag}: unquantized logits differ by {diff} of {mag}"
    );
    assert_eq!(
        greedy(&plain, &prompt, 6),
        greedy(&reference, &prompt, 6),
        "{tag}"
    );

    let q8 = Arc::new(convert(&dir, Quantization::Q8_0).unwrap());
    let q8_types: Vec<GgmlType> = q8
        .tensors()
        .iter()
        .filter(|t| t.dims.len() == 2)
        .map(|t| t.ty)
        .collect();
    assert!(
        q8_types.iter().all(|&t| t == GgmlType::Q8_0),
        "{tag}: {q8_types:?}"
    );
    let got = logits(Model::load(Arc::clone(&q8)).unwrap(), &prompt);
    let diff = want
        .iter()
        .zip(&got)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max);
    assert!(
        diff <= 0.05 * mag,
        "{tag}: q8_0 logits differ by {diff} of {mag}"
    );
    let vocab = want.len() / prompt.len();
    let same = argmaxes(&want, vocab)
        .iter()
        .zip(argmaxes(&got, vocab))
        .filter(|(a, b)| **a == *b)
        .count();
    assert!(
        same * 10 >= prompt.len() * 9,
        "{tag}: q8_0 top token agrees at {same} of {}",
        prompt.len()
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn llama_checkpoint_converts_to_the_same_model() {
    check(TinyModel::llama(), 1);
}

#[test]
fn sharded_gemma3_checkpoint_converts_to_the_same_model() {
    check(TinyModel::gemma3(), 3);
}
