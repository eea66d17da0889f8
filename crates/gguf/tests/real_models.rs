//! The real model files (when present) open with the metadata and tensor mix recorded in
//! /work/shared/design/NOTES.md; counts per type and data offsets were cross-checked with the
//! Python `gguf` package's GGUFReader.

#![allow(clippy::unwrap_used)] // tests may unwrap

use std::collections::BTreeMap;
use std::path::PathBuf;

use pagoda_gguf::{GgmlType, GgufFile};

fn model_dir() -> PathBuf {
    match std::env::var_os("PAGODA_MODEL_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/pagoda/models")
        }
    }
}

struct Expected {
    file: &'static str,
    file_len: u64,
    architecture: &'static str,
    block_count: u32,
    embedding_length: u32,
    n_vocab: usize,
    tensor_types: &'static [(GgmlType, usize)],
    /// Sum of all tensors' element counts, when known.
    n_params: Option<u64>,
    /// From GGUFReader.data_offset, when known.
    data_offset: Option<u64>,
    tied_embeddings: bool,
}

const MODELS: &[Expected] = &[
    Expected {
        file: "SmolLM2-135M-Instruct.Q4_1.gguf",
        file_len: 98_362_432,
        architecture: "llama",
        block_count: 30,
        embedding_length: 576,
        n_vocab: 49152,
        tensor_types: &[
            (GgmlType::F32, 61),
            (GgmlType::Q4_1, 210),
            (GgmlType::Q8_0, 1),
        ],
        n_params: Some(134_515_008),
        data_offset: Some(1_785_664),
        tied_embeddings: true,
    },
    Expected {
        file: "gemma-3-270m-q4_k_m.gguf",
        file_len: 253_113_024,
        architecture: "gemma3",
        block_count: 18,
        embedding_length: 640,
        n_vocab: 262_144,
        tensor_types: &[
            (GgmlType::F32, 109),
            (GgmlType::Q5_0, 81),
            (GgmlType::Q8_0, 10),
            (GgmlType::Q4_K, 27),
            (GgmlType::Q6_K, 9),
        ],
        n_params: Some(268_098_176),
        data_offset: Some(6_525_120),
        tied_embeddings: true,
    },
    Expected {
        file: "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        file_len: 491_400_064,
        architecture: "qwen2",
        block_count: 24,
        embedding_length: 896,
        n_vocab: 151_936,
        tensor_types: &[
            (GgmlType::Q5_0, 133),
            (GgmlType::F32, 121),
            (GgmlType::Q8_0, 13),
            (GgmlType::Q6_K, 12),
            (GgmlType::Q4_K, 12),
        ],
        n_params: None,
        data_offset: None,
        tied_embeddings: false,
    },
];

#[test]
fn real_models_open_with_expected_metadata_and_tensors() {
    let dir = model_dir();
    let mut opened = 0;
    for m in MODELS {
        let path = dir.join(m.file);
        if !path.exists() {
            eprintln!("skipping {}: not in {}", m.file, dir.display());
            continue;
        }
        let file = GgufFile::open(&path).unwrap_or_else(|e| panic!("{}: {e}", m.file));
        opened += 1;
        assert_eq!(file.version(), 3, "{}", m.file);
        assert_eq!(file.file_len(), m.file_len, "{}", m.file);
        assert_eq!(file.alignment(), 32);
        let arch = file.architecture().unwrap();
        assert_eq!(arch, m.architecture);
        assert_eq!(
            file.get_u32(&format!("{arch}.block_count")).unwrap(),
            Some(m.block_count)
        );
        assert_eq!(
            file.get_u32(&format!("{arch}.embedding_length")).unwrap(),
            Some(m.embedding_length)
        );
        assert_eq!(
            file.get_str_array("tokenizer.ggml.tokens")
                .unwrap()
                .unwrap()
                .len(),
            m.n_vocab
        );
        assert_eq!(
            file.get_u32("general.quantization_version").unwrap(),
            Some(2)
        );

        let mut types = BTreeMap::new();
        for t in file.tensors() {
            *types.entry(t.ty.name()).or_insert(0) += 1;
        }
        let expected: BTreeMap<_, _> = m
            .tensor_types
            .iter()
            .map(|&(ty, n)| (ty.name(), n))
            .collect();
        assert_eq!(types, expected, "{} tensor types", m.file);
        if let Some(n) = m.n_params {
            assert_eq!(
                file.tensors().iter().map(|t| t.n_elements()).sum::<u64>(),
                n
            );
        }
        if let Some(offset) = m.data_offset {
            assert_eq!(file.data_offset(), offset);
        }

        let total: u64 = file.tensors().iter().map(|t| t.size as u64).sum();
        assert!(
            file.data_offset() + total <= file.file_len(),
            "{}: tensor bytes exceed the file",
            m.file
        );
        for t in file.tensors() {
            assert_eq!(file.tensor_data(t).len(), t.size);
            assert_eq!(
                file.tensor_data(t).as_ptr() as usize % 32,
                0,
                "{} unaligned in memory",
                t.name
            );
            let rows: u64 = t.dims[1..].iter().product();
            let row = t.ty.row_bytes(t.dims[0] as usize).unwrap();
            assert_eq!(t.size as u64, row as u64 * rows, "{}", t.name);
        }
        let embd = file.tensor("token_embd.weight").unwrap();
        assert_eq!(embd.dims, [u64::from(m.embedding_length), m.n_vocab as u64]);
        assert_eq!(file.tensor("output.weight").is_none(), m.tied_embeddings);
        let n_blocks = file
            .tensors()
            .iter()
            .filter(|t| t.name.ends_with(".attn_norm.weight"))
            .count();
        assert_eq!(n_blocks, m.block_count as usize);
    }
    eprintln!("opened {opened} real model files");
}

#[test]
fn smollm2_scalars_match_notes() {
    let path = model_dir().join("SmolLM2-135M-Instruct.Q4_1.gguf");
    if !path.exists() {
        eprintln!("skipping: {} absent", path.display());
        return;
    }
    let file = GgufFile::open(&path).unwrap();
    assert_eq!(file.get_u32("llama.attention.head_count").unwrap(), Some(9));
    assert_eq!(
        file.get_u32("llama.attention.head_count_kv").unwrap(),
        Some(3)
    );
    assert_eq!(
        file.get_f32("llama.rope.freq_base").unwrap(),
        Some(100000.0)
    );
    assert_eq!(
        file.get_f32("llama.attention.layer_norm_rms_epsilon")
            .unwrap(),
        Some(1e-5)
    );
    assert_eq!(file.get_str("tokenizer.ggml.model").unwrap(), Some("gpt2"));
    assert_eq!(
        file.get_bool("tokenizer.ggml.add_bos_token").unwrap(),
        Some(false)
    );
    assert_eq!(
        file.get_u32("tokenizer.ggml.eos_token_id").unwrap(),
        Some(2)
    );
    assert_eq!(
        file.get_str_array("tokenizer.ggml.merges")
            .unwrap()
            .unwrap()
            .len(),
        48900
    );
    assert_eq!(
        file.get_str("tokenizer.chat_template")
            .unwrap()
            .unwrap()
            .len(),
        368
    );
    let types = file
        .get_i32_array("tokenizer.ggml.token_type")
        .unwrap()
        .unwrap();
    assert_eq!(
        types.iter().filter(|&&t| t == 3).count(),
        17,
        "control tokens"
    );
}
