//! A tiny random model written as a Hugging Face checkpoint (testkit's hf_checkpoint: HF's
//! names, Llama's Q/K rows in HF's RoPE pairing, Gemma's norms stored as `w - 1`, one
//! safetensors file or three shards with an index) converts back into the same model:
//! unquantized it gives the logits of the GGUF's weights in f32, with in-situ Q8_0 the same
//! greedy tokens within Q8_0's error.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::sync::Arc;

use pagoda_gguf::{GgmlType, GgufAssembly, GgufFile};
use pagoda_hf::{Quantization, convert};
use pagoda_kernels::quant::dequantize_row;
use pagoda_model::{CpuExecutor, ForwardBatch, Logits, Model, SeqChunk};
use pagoda_testkit::hf_checkpoint;
use pagoda_testkit::tiny_model::TinyModel;

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

fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pagoda-hf-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Every position's logits of `tokens` in one step.
fn logits(model: Model, tokens: &[u32]) -> Vec<f32> {
    let mut exec = CpuExecutor::new(model, 8, 16).unwrap();
    let table: Vec<u32> = (0..8).collect();
    let batch = ForwardBatch::from_seqs(
        &[SeqChunk {
            tokens,
            start: 0,
            block_tables: std::slice::from_ref(&table),
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
    // The seed tells apart two specs of one architecture (llama and mistral), whose tests
    // run at once and must not share a scratch directory.
    let tag = format!("{:?}-{}-{shards}", spec.arch, spec.seed);
    let gguf = GgufFile::from_bytes(spec.to_bytes()).unwrap();
    let dir = scratch(&tag);
    hf_checkpoint::write(&spec, &dir, shards).unwrap();
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
    // The top token must agree wherever the reference's top two are further apart than the
    // quantization moved any logit (2 x diff): elsewhere a random model's near-tie may flip.
    let vocab = want.len() / prompt.len();
    let (top_want, top_got) = (argmaxes(&want, vocab), argmaxes(&got, vocab));
    for (i, row) in want.chunks_exact(vocab).enumerate() {
        let mut sorted = row.to_vec();
        sorted.sort_by(|a, b| b.total_cmp(a));
        if sorted[0] - sorted[1] > 2.0 * diff {
            assert_eq!(top_want[i], top_got[i], "{tag}: q8_0 top token at {i}");
        }
    }
    let same = top_want
        .iter()
        .zip(&top_got)
        .filter(|(a, b)| a == b)
        .count();
    assert!(
        same * 2 >= prompt.len(),
        "{tag}: q8_0 top token agrees at {same} of {}",
        prompt.len()
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn llama_checkpoint_converts_to_the_same_model() {
    check(TinyModel::llama(), 1);
}

/// 12 prompt tokens over a window of 8: a dropped window would change the logits.
#[test]
fn mistral_checkpoint_keeps_its_sliding_window() {
    check(TinyModel::mistral(), 1);
}

#[test]
fn sharded_gemma3_checkpoint_converts_to_the_same_model() {
    check(TinyModel::gemma3(), 3);
}

#[test]
fn qwen3_checkpoint_converts_to_the_same_model() {
    check(TinyModel::qwen3(), 1);
}
