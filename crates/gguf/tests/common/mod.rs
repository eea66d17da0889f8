//! Small writer-made GGUF files shared by the test files (and the fuzz seed corpus).

#![allow(clippy::unwrap_used)] // tests may unwrap
#![allow(dead_code)]

use pagoda_gguf::GgmlType;
use pagoda_testkit::gguf_writer::{GgufWriter, Value, ValueType};

/// A small valid file with a bit of everything: scalars, strings, nested arrays, three tensors.
pub fn small_model() -> GgufWriter {
    GgufWriter::new()
        .kv("general.architecture", "llama")
        .kv("llama.block_count", Value::U32(2))
        .kv("llama.rope.freq_base", Value::F32(10000.0))
        .kv("tokenizer.ggml.add_bos_token", Value::Bool(false))
        .kv(
            "tokenizer.ggml.tokens",
            Value::str_array(["<s>", "</s>", "a"]),
        )
        .kv("tokenizer.ggml.scores", Value::f32_array([0.0, 0.0, -1.0]))
        .kv(
            "test.nested",
            Value::Array(
                ValueType::Array,
                vec![Value::i32_array([1, 2]), Value::str_array(["x"])],
            ),
        )
        .tensor_patterned("token_embd.weight", &[32, 3], GgmlType::Q8_0)
        .tensor_patterned("blk.0.attn_norm.weight", &[4], GgmlType::F32)
        .tensor_patterned("blk.3.attn_q.weight", &[32, 2], GgmlType::Q4_1)
}

/// Valid files used as fuzz seeds: different versions, alignments, types and shapes.
pub fn seed_files() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("small_model_v3", small_model().to_bytes()),
        ("small_model_v2", small_model().version(2).to_bytes()),
        (
            "metadata_only",
            GgufWriter::new()
                .kv("general.architecture", "gemma3")
                .to_bytes(),
        ),
        ("empty", GgufWriter::new().to_bytes()),
        (
            "aligned_64",
            GgufWriter::new()
                .alignment(64)
                .kv("general.architecture", "qwen2")
                .tensor_patterned("a", &[256, 1], GgmlType::Q4_K)
                .tensor_patterned("b", &[256], GgmlType::Q6_K)
                .tensor_patterned("c", &[32, 1, 1, 2], GgmlType::Q5_0)
                .tensor_patterned("d", &[3, 2], GgmlType::F16)
                .to_bytes(),
        ),
        (
            "every_scalar",
            GgufWriter::new()
                .kv("u8", Value::U8(1))
                .kv("i8", Value::I8(-1))
                .kv("u16", Value::U16(2))
                .kv("i16", Value::I16(-2))
                .kv("u32", Value::U32(3))
                .kv("i32", Value::I32(-3))
                .kv("u64", Value::U64(4))
                .kv("i64", Value::I64(-4))
                .kv("f32", Value::F32(0.5))
                .kv("f64", Value::F64(0.25))
                .kv("bool", Value::Bool(true))
                .kv("str", "s")
                .kv(
                    "bools",
                    Value::Array(ValueType::Bool, vec![Value::Bool(true)]),
                )
                .kv("u64s", Value::Array(ValueType::U64, vec![Value::U64(9)]))
                .to_bytes(),
        ),
    ]
}
