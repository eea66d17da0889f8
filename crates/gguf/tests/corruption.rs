//! Each kind of corrupted or hostile file is rejected with a message naming what is wrong.

#![allow(clippy::unwrap_used)] // tests may unwrap

use crate::common;

use pagoda_gguf::{GgmlType, GgufFile, MAX_ARRAY_DEPTH};
use pagoda_testkit::gguf_writer::{
    GgufWriter, Layout, TensorSpec, Value, ValueType, patch_u32, patch_u64,
};

fn error_of(bytes: Vec<u8>) -> String {
    match GgufFile::from_bytes(bytes) {
        Ok(file) => panic!("corrupt file parsed: {file:?}"),
        Err(e) => e.to_string(),
    }
}

fn small() -> (Vec<u8>, Layout) {
    common::small_model().build()
}

fn kv<'a>(layout: &'a Layout, key: &str) -> &'a pagoda_testkit::gguf_writer::KvLayout {
    layout.kvs.iter().find(|k| k.key == key).unwrap()
}

#[test]
fn the_uncorrupted_file_parses() {
    let (bytes, _) = small();
    let file = GgufFile::from_bytes(bytes).unwrap();
    assert_eq!(file.tensors().len(), 3);
}

#[test]
fn bad_magic() {
    let (mut bytes, _) = small();
    bytes[3] = b'X';
    assert_eq!(
        error_of(bytes),
        "not a GGUF file: magic is [47, 47, 55, 58], expected \"GGUF\" (47 47 55 46)"
    );
    assert!(error_of(b"GX".to_vec()).starts_with("not a GGUF file"));
    assert!(
        error_of(b"GG".to_vec())
            .starts_with("header: magic: needs 4 bytes at offset 0, only 2 left")
    );
}

#[test]
fn unsupported_versions() {
    let v1 = common::small_model().version(1).to_bytes();
    assert_eq!(
        error_of(v1),
        "GGUF version 1 is not supported: pagoda reads versions 2 and 3"
    );
    let v4 = common::small_model().version(4).to_bytes();
    assert!(error_of(v4).starts_with("GGUF version 4 is not supported"));
    let (mut big_endian, layout) = small();
    big_endian[layout.version..layout.version + 4].copy_from_slice(&3u32.to_be_bytes());
    assert!(error_of(big_endian).starts_with("big-endian GGUF (version 3 byte-swapped)"));
}

#[test]
fn tensor_data_past_end_of_file() {
    let (mut bytes, layout) = small();
    bytes.pop();
    let range = layout.tensor_data[2].clone();
    assert_eq!(
        error_of(bytes.clone()),
        format!(
            "tensor blk.3.attn_q.weight: data [{}, {}) past end of file (len {})",
            range.start,
            range.end,
            bytes.len()
        )
    );

    // An offset so large that data start + offset overflows u64 is still just "past the end".
    let (mut bytes, layout) = small();
    patch_u64(&mut bytes, layout.tensor_infos[0].offset, u64::MAX - 31);
    let msg = error_of(bytes);
    assert!(
        msg.starts_with("tensor token_embd.weight: data [") && msg.contains("past end of file"),
        "{msg}"
    );
}

#[test]
fn hostile_counts_are_rejected_before_allocating() {
    let (mut bytes, layout) = small();
    let tokens = kv(&layout, "tokenizer.ggml.tokens");
    patch_u64(&mut bytes, tokens.value + 4, u64::from(u32::MAX));
    let left = bytes.len() - (tokens.value + 12);
    assert_eq!(
        error_of(bytes),
        format!(
            "metadata key 'tokenizer.ggml.tokens': array of 4294967295 strings needs at least {} bytes, only {left} left",
            u64::from(u32::MAX) * 8
        )
    );

    let (mut bytes, layout) = small();
    patch_u64(
        &mut bytes,
        kv(&layout, "tokenizer.ggml.scores").value + 4,
        u64::MAX,
    );
    assert!(error_of(bytes).contains("array of 18446744073709551615 f32s needs at least"));

    let huge_kvs = common::small_model().kv_count_override(u64::MAX).to_bytes();
    assert!(
        error_of(huge_kvs)
            .starts_with("header: a count of 18446744073709551615 metadata entries needs at least")
    );
    let huge_tensors = common::small_model()
        .tensor_count_override(1 << 40)
        .to_bytes();
    assert!(
        error_of(huge_tensors)
            .starts_with("header: a count of 1099511627776 tensor infos needs at least")
    );

    // A count that is wrong but small just runs into the next section and fails there.
    let one_more_kv = common::small_model().kv_count_override(8).to_bytes();
    assert!(GgufFile::from_bytes(one_more_kv).is_err());
    let one_more_tensor = common::small_model().tensor_count_override(4).to_bytes();
    assert!(GgufFile::from_bytes(one_more_tensor).is_err());
}

#[test]
fn hostile_string_lengths() {
    let (mut bytes, layout) = small();
    patch_u64(&mut bytes, layout.kvs[0].start, u64::MAX);
    let msg = error_of(bytes);
    assert!(
        msg.starts_with("metadata entry #0: key name of 18446744073709551615 bytes: needs 18446744073709551615 bytes at offset 32"),
        "{msg}"
    );

    let (mut bytes, layout) = small();
    patch_u64(
        &mut bytes,
        kv(&layout, "general.architecture").value,
        1 << 33,
    );
    assert!(error_of(bytes).starts_with(
        "metadata key 'general.architecture': string value of 8589934592 bytes: needs"
    ));

    let (mut bytes, layout) = small();
    patch_u64(&mut bytes, layout.tensor_infos[1].start, 1 << 20);
    assert!(
        error_of(bytes)
            .starts_with("tensor info #1: tensor name of 1048576 bytes: needs 1048576 bytes")
    );
}

#[test]
fn bad_bool_bytes() {
    let (mut bytes, layout) = small();
    bytes[kv(&layout, "tokenizer.ggml.add_bos_token").value] = 2;
    assert_eq!(
        error_of(bytes),
        "metadata key 'tokenizer.ggml.add_bos_token': bad bool byte 2 (expected 0 or 1)"
    );
    let array = GgufWriter::new()
        .kv(
            "flags",
            Value::Array(ValueType::Bool, vec![Value::Bool(true), Value::U8(7)]),
        )
        .to_bytes();
    assert_eq!(
        error_of(array),
        "metadata key 'flags': element 1: bad bool byte 7 (expected 0 or 1)"
    );
}

#[test]
fn invalid_utf8_names_the_key() {
    let (mut bytes, layout) = small();
    // First string of the token array: element type u32, count u64, then the u64 length.
    bytes[kv(&layout, "tokenizer.ggml.tokens").value + 12 + 8] = 0xff;
    assert_eq!(
        error_of(bytes),
        "metadata key 'tokenizer.ggml.tokens': element 0: invalid UTF-8 in string value"
    );
    let (mut bytes, layout) = small();
    bytes[kv(&layout, "general.architecture").value + 8] = 0xc3;
    assert_eq!(
        error_of(bytes),
        "metadata key 'general.architecture': invalid UTF-8 in string value"
    );
    let (mut bytes, layout) = small();
    bytes[layout.kvs[1].start + 8] = 0x80;
    assert_eq!(
        error_of(bytes),
        "metadata entry #1: invalid UTF-8 in key name"
    );
    let (mut bytes, layout) = small();
    bytes[layout.tensor_infos[2].start + 8] = 0xfe;
    assert_eq!(
        error_of(bytes),
        "tensor info #2: invalid UTF-8 in tensor name"
    );
}

#[test]
fn unknown_value_types() {
    let (mut bytes, layout) = small();
    patch_u32(&mut bytes, kv(&layout, "llama.block_count").value_type, 13);
    assert_eq!(
        error_of(bytes),
        "metadata key 'llama.block_count': unknown metadata value type 13"
    );
    let (mut bytes, layout) = small();
    patch_u32(
        &mut bytes,
        kv(&layout, "tokenizer.ggml.scores").value,
        0xdead,
    );
    assert_eq!(
        error_of(bytes),
        "metadata key 'tokenizer.ggml.scores': array element: unknown metadata value type 57005"
    );
}

#[test]
fn nesting_depth_is_bounded() {
    let nest = |depth: usize| {
        let mut v = Value::i32_array([1]);
        for _ in 1..depth {
            v = Value::Array(ValueType::Array, vec![v]);
        }
        GgufWriter::new().kv("deep", v).to_bytes()
    };
    assert!(GgufFile::from_bytes(nest(MAX_ARRAY_DEPTH)).is_ok());
    assert_eq!(
        error_of(nest(MAX_ARRAY_DEPTH + 1)),
        format!(
            "metadata key 'deep': {}: arrays nested deeper than 16 levels",
            vec!["element 0"; MAX_ARRAY_DEPTH - 1].join(": ")
        )
    );
}

#[test]
fn unknown_ggml_type_names_the_tensor() {
    let (mut bytes, layout) = small();
    patch_u32(&mut bytes, layout.tensor_infos[0].type_id, 4);
    assert_eq!(
        error_of(bytes),
        "tensor token_embd.weight: unknown or unsupported ggml type id 4"
    );
}

#[test]
fn dimension_count_out_of_range() {
    for n_dims in [0, 5, u32::MAX] {
        let (mut bytes, layout) = small();
        patch_u32(&mut bytes, layout.tensor_infos[1].n_dims, n_dims);
        assert_eq!(
            error_of(bytes),
            format!("tensor blk.0.attn_norm.weight: {n_dims} dimensions, expected 1 to 4")
        );
    }
}

fn one_tensor(dims: &[u64], ty: GgmlType) -> Vec<u8> {
    GgufWriter::new()
        .tensor_raw(TensorSpec {
            name: "w".into(),
            dims: dims.to_vec(),
            type_id: ty.id(),
            data: vec![0; 64],
        })
        .to_bytes()
}

#[test]
fn bad_shapes() {
    assert_eq!(
        error_of(one_tensor(&[4, 0], GgmlType::F32)),
        "tensor w: dimension 1 is 0 (dims [4, 0])"
    );
    assert_eq!(
        error_of(one_tensor(&[1 << 32, 1 << 32, 1 << 32], GgmlType::F32)),
        "tensor w: element count of dims [4294967296, 4294967296, 4294967296] overflows"
    );
    assert_eq!(
        error_of(one_tensor(&[1 << 62], GgmlType::F32)),
        "tensor w: byte size of F32 dims [4611686018427387904] overflows"
    );
    assert_eq!(
        error_of(one_tensor(&[33, 2], GgmlType::Q8_0)),
        "tensor w: ne0 = 33 is not a multiple of the Q8_0 block size 32"
    );
    assert_eq!(
        error_of(one_tensor(&[512 + 32], GgmlType::Q4_K)),
        "tensor w: ne0 = 544 is not a multiple of the Q4_K block size 256"
    );
}

#[test]
fn misaligned_tensor_offset() {
    let (mut bytes, layout) = small();
    let real = (layout.tensor_data[1].start - layout.data_offset) as u64;
    patch_u64(&mut bytes, layout.tensor_infos[1].offset, real + 4);
    assert_eq!(
        error_of(bytes),
        format!(
            "tensor blk.0.attn_norm.weight: data offset {} is not a multiple of the alignment 32",
            real + 4
        )
    );
}

#[test]
fn overlapping_tensors() {
    let (mut bytes, layout) = small();
    patch_u64(&mut bytes, layout.tensor_infos[2].offset, 0);
    let first = layout.tensor_data[0].clone();
    let d = layout.data_offset;
    assert_eq!(
        error_of(bytes),
        format!(
            "tensors token_embd.weight [{}, {}) and blk.3.attn_q.weight [{d}, {}) overlap",
            first.start,
            first.end,
            d + 40
        )
    );
}

#[test]
fn duplicates() {
    let dup_key = common::small_model()
        .kv("llama.block_count", Value::U32(3))
        .to_bytes();
    assert_eq!(
        error_of(dup_key),
        "duplicate metadata key 'llama.block_count'"
    );
    let dup_tensor = common::small_model()
        .tensor_patterned("blk.0.attn_norm.weight", &[4], GgmlType::F32)
        .to_bytes();
    assert_eq!(
        error_of(dup_tensor),
        "duplicate tensor name 'blk.0.attn_norm.weight'"
    );
}

#[test]
fn bad_alignment_values() {
    for (value, found) in [
        (Value::U32(0), "0"),
        (Value::U32(48), "48"),
        (Value::U64(32), "a u64 value"),
        (Value::str("32"), "a string value"),
    ] {
        let bytes = GgufWriter::new().kv("general.alignment", value).to_bytes();
        assert_eq!(
            error_of(bytes),
            format!("general.alignment must be a u32 power of two, found {found}")
        );
    }
}

#[test]
fn truncated_header_counts() {
    let (bytes, layout) = small();
    let msg = error_of(bytes[..layout.kv_count + 3].to_vec());
    assert_eq!(
        msg,
        format!(
            "header: metadata count: needs 8 bytes at offset {}, only 3 left (file len {})",
            layout.kv_count,
            layout.kv_count + 3
        )
    );
}
