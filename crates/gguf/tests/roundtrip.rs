//! Files written by the testkit writer read back with every value, tensor and offset intact.

#![allow(clippy::unwrap_used)] // tests may unwrap

use pagoda_gguf::{GgmlType, GgufError, GgufFile, MetaArray, MetaValue};
use pagoda_testkit::gguf_writer::{GgufWriter, Value, ValueType};

fn every_scalar() -> Vec<(&'static str, Value, MetaValue)> {
    vec![
        ("t.u8", Value::U8(200), MetaValue::U8(200)),
        ("t.i8", Value::I8(-100), MetaValue::I8(-100)),
        ("t.u16", Value::U16(60000), MetaValue::U16(60000)),
        ("t.i16", Value::I16(-30000), MetaValue::I16(-30000)),
        (
            "t.u32",
            Value::U32(4_000_000_000),
            MetaValue::U32(4_000_000_000),
        ),
        (
            "t.i32",
            Value::I32(-2_000_000_000),
            MetaValue::I32(-2_000_000_000),
        ),
        ("t.u64", Value::U64(u64::MAX), MetaValue::U64(u64::MAX)),
        ("t.i64", Value::I64(i64::MIN), MetaValue::I64(i64::MIN)),
        ("t.f32", Value::F32(1e-5), MetaValue::F32(1e-5)),
        ("t.f64", Value::F64(-1.5e300), MetaValue::F64(-1.5e300)),
        ("t.bool_t", Value::Bool(true), MetaValue::Bool(true)),
        ("t.bool_f", Value::Bool(false), MetaValue::Bool(false)),
        (
            "t.str",
            Value::str("héllo ▁ <0x0A>"),
            MetaValue::String("héllo ▁ <0x0A>".into()),
        ),
        (
            "t.empty_str",
            Value::str(""),
            MetaValue::String(String::new()),
        ),
    ]
}

fn every_array() -> Vec<(&'static str, Value, MetaArray)> {
    vec![
        (
            "a.u8",
            Value::Array(ValueType::U8, vec![Value::U8(0), Value::U8(255)]),
            MetaArray::U8(vec![0, 255]),
        ),
        (
            "a.i8",
            Value::Array(ValueType::I8, vec![Value::I8(-128), Value::I8(127)]),
            MetaArray::I8(vec![-128, 127]),
        ),
        (
            "a.u16",
            Value::Array(ValueType::U16, vec![Value::U16(1), Value::U16(65535)]),
            MetaArray::U16(vec![1, 65535]),
        ),
        (
            "a.i16",
            Value::Array(ValueType::I16, vec![Value::I16(-2)]),
            MetaArray::I16(vec![-2]),
        ),
        (
            "a.u32",
            Value::Array(ValueType::U32, vec![Value::U32(7), Value::U32(8)]),
            MetaArray::U32(vec![7, 8]),
        ),
        (
            "a.i32",
            Value::i32_array([1, -1, 3]),
            MetaArray::I32(vec![1, -1, 3]),
        ),
        (
            "a.u64",
            Value::Array(ValueType::U64, vec![Value::U64(1 << 40)]),
            MetaArray::U64(vec![1 << 40]),
        ),
        (
            "a.i64",
            Value::Array(ValueType::I64, vec![Value::I64(-(1 << 40))]),
            MetaArray::I64(vec![-(1 << 40)]),
        ),
        (
            "a.f32",
            Value::f32_array([-1000.0, 0.5]),
            MetaArray::F32(vec![-1000.0, 0.5]),
        ),
        (
            "a.f64",
            Value::Array(ValueType::F64, vec![Value::F64(0.25)]),
            MetaArray::F64(vec![0.25]),
        ),
        (
            "a.bool",
            Value::Array(ValueType::Bool, vec![Value::Bool(true), Value::Bool(false)]),
            MetaArray::Bool(vec![true, false]),
        ),
        (
            "a.str",
            Value::str_array(["a", "", "Ġthe"]),
            MetaArray::Str(vec!["a".into(), "".into(), "Ġthe".into()]),
        ),
        (
            "a.empty",
            Value::Array(ValueType::U32, vec![]),
            MetaArray::U32(vec![]),
        ),
        (
            "a.nested",
            Value::Array(
                ValueType::Array,
                vec![
                    Value::i32_array([1, 2]),
                    Value::str_array(["x"]),
                    Value::Array(
                        ValueType::Array,
                        vec![
                            Value::f32_array([3.0]),
                            Value::Array(ValueType::Bool, vec![]),
                        ],
                    ),
                ],
            ),
            MetaArray::Array(vec![
                MetaArray::I32(vec![1, 2]),
                MetaArray::Str(vec!["x".into()]),
                MetaArray::Array(vec![MetaArray::F32(vec![3.0]), MetaArray::Bool(vec![])]),
            ]),
        ),
    ]
}

fn full_writer(version: u32) -> GgufWriter {
    let mut w = GgufWriter::new()
        .version(version)
        .kv("general.architecture", "llama");
    for (key, value, _) in every_scalar() {
        w = w.kv(key, value);
    }
    for (key, value, _) in every_array() {
        w = w.kv(key, value);
    }
    w.tensor_patterned("token_embd.weight", &[64, 3], GgmlType::Q8_0)
        .tensor_patterned("blk.0.attn_norm.weight", &[5], GgmlType::F32)
        .tensor_patterned("blk.0.ffn_down.weight", &[256, 2], GgmlType::Q4_K)
        .tensor_patterned("blk.0.x", &[2, 3, 4, 5], GgmlType::F16)
}

#[test]
fn every_value_type_and_tensor_round_trips_in_v2_and_v3() {
    for version in [2, 3] {
        let writer = full_writer(version);
        let (bytes, layout) = writer.build();
        let file = GgufFile::from_bytes(bytes.clone()).unwrap();
        assert_eq!(file.version(), version);
        assert_eq!(file.architecture().unwrap(), "llama");
        assert_eq!(file.alignment(), 32);

        let keys: Vec<&str> = file.metadata().map(|(k, _)| k).collect();
        let mut expected_keys = vec!["general.architecture"];
        expected_keys.extend(every_scalar().iter().map(|s| s.0));
        expected_keys.extend(every_array().iter().map(|a| a.0));
        assert_eq!(keys, expected_keys, "metadata in file order");
        for (key, _, expected) in every_scalar() {
            assert_eq!(file.get(key), Some(&expected), "{key}");
        }
        for (key, _, expected) in every_array() {
            assert_eq!(file.get(key), Some(&MetaValue::Array(expected)), "{key}");
        }

        let names: Vec<&str> = file.tensors().iter().map(|t| t.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "token_embd.weight",
                "blk.0.attn_norm.weight",
                "blk.0.ffn_down.weight",
                "blk.0.x"
            ]
        );
        assert_eq!(file.data_offset() as usize, layout.data_offset);
        for (t, range) in file.tensors().iter().zip(&layout.tensor_data) {
            assert_eq!(t.offset as usize, range.start, "{}", t.name);
            assert_eq!(t.size, range.len(), "{}", t.name);
            assert_eq!(t.offset % 32, 0);
            assert_eq!(file.tensor_data(t), &bytes[range.clone()], "{}", t.name);
            assert_eq!(file.tensor(&t.name), Some(t));
        }
        let q4k = file.tensor("blk.0.ffn_down.weight").unwrap();
        assert_eq!(
            (q4k.ty, q4k.dims.as_slice(), q4k.n_elements(), q4k.size),
            (GgmlType::Q4_K, &[256u64, 2][..], 512, 288)
        );
        let x = file.tensor("blk.0.x").unwrap();
        assert_eq!((x.n_elements(), x.size), (120, 240));
        assert!(file.tensor("missing").is_none());
    }
}

#[test]
fn custom_alignment_places_data_on_its_boundary() {
    for alignment in [1u32, 8, 64, 4096] {
        let bytes = GgufWriter::new()
            .kv("general.architecture", "gemma3")
            .alignment(alignment)
            .tensor_patterned("a", &[3], GgmlType::F32)
            .tensor_patterned("b", &[32], GgmlType::Q4_1)
            .to_bytes();
        let file = GgufFile::from_bytes(bytes).unwrap();
        assert_eq!(file.alignment(), alignment as usize);
        for t in file.tensors() {
            assert_eq!(
                t.offset % u64::from(alignment),
                0,
                "{} at alignment {alignment}",
                t.name
            );
        }
        assert_eq!(file.tensor_data(file.tensor("b").unwrap()).len(), 20);
    }
}

#[test]
fn integer_getters_accept_any_integer_type_that_fits() {
    let file = GgufFile::from_bytes(
        GgufWriter::new()
            .kv("k.u8", Value::U8(7))
            .kv("k.i32", Value::I32(30))
            .kv("k.u64", Value::U64(1 << 40))
            .kv("k.neg", Value::I64(-1))
            .kv("k.f64", Value::F64(0.5))
            .kv("k.str", "text")
            .kv("k.bool", true)
            .to_bytes(),
    )
    .unwrap();
    assert_eq!(file.get_u32("k.u8").unwrap(), Some(7));
    assert_eq!(file.get_u32("k.i32").unwrap(), Some(30));
    assert_eq!(file.get_u64("k.i32").unwrap(), Some(30));
    assert_eq!(file.get_u64("k.u64").unwrap(), Some(1 << 40));
    assert_eq!(file.get_i64("k.neg").unwrap(), Some(-1));
    assert_eq!(file.get_u32("absent").unwrap(), None);
    assert_eq!(file.get_f32("k.f64").unwrap(), Some(0.5));
    assert_eq!(file.get_bool("k.bool").unwrap(), Some(true));
    assert_eq!(file.get_str("k.str").unwrap(), Some("text"));

    let too_big = file.get_u32("k.u64").unwrap_err().to_string();
    assert_eq!(
        too_big,
        "metadata key 'k.u64': value 1099511627776 does not fit in u32"
    );
    let negative = file.get_u64("k.neg").unwrap_err().to_string();
    assert_eq!(
        negative,
        "metadata key 'k.neg': value -1 does not fit in u64"
    );
    let wrong = file.get_u32("k.str").unwrap_err().to_string();
    assert_eq!(wrong, "metadata key 'k.str': expected u32, found string");
    let wrong = file.get_str("k.u8").unwrap_err().to_string();
    assert_eq!(wrong, "metadata key 'k.u8': expected string, found u8");
    let wrong = file.get_f32("k.i32").unwrap_err().to_string();
    assert_eq!(wrong, "metadata key 'k.i32': expected f32, found i32");
    let wrong = file.get_str_array("k.bool").unwrap_err().to_string();
    assert_eq!(
        wrong,
        "metadata key 'k.bool': expected array of string, found bool"
    );
    assert!(
        matches!(file.architecture(), Err(GgufError::MissingKey(k)) if k == "general.architecture")
    );
}

#[test]
fn array_getters_borrow_typed_slices() {
    let file = GgufFile::from_bytes(
        GgufWriter::new()
            .kv("tokens", Value::str_array(["<s>", "a", "b"]))
            .kv("scores", Value::f32_array([0.0, -1.0, -2.0]))
            .kv("types", Value::i32_array([3, 1, 1]))
            .kv("empty", Value::Array(ValueType::U8, vec![]))
            .to_bytes(),
    )
    .unwrap();
    assert_eq!(
        file.get_str_array("tokens").unwrap().unwrap(),
        ["<s>", "a", "b"]
    );
    assert_eq!(
        file.get_f32_array("scores").unwrap().unwrap(),
        [0.0, -1.0, -2.0]
    );
    assert_eq!(file.get_i32_array("types").unwrap().unwrap(), [3, 1, 1]);
    assert!(file.get_str_array("empty").unwrap().unwrap().is_empty());
    assert_eq!(
        file.get_f32_array("types").unwrap_err().to_string(),
        "metadata key 'types': expected array of f32, found array of i32"
    );
    assert_eq!(file.get_array("tokens").unwrap().unwrap().len(), 3);
}

#[test]
fn open_maps_a_file_from_disk() {
    let dir = std::env::temp_dir().join(format!("pagoda-gguf-open-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("tiny.gguf");
    let writer = full_writer(3);
    writer.write_to(&path).unwrap();
    let file = GgufFile::open(&path).unwrap();
    let (bytes, layout) = writer.build();
    assert_eq!(file.file_len() as usize, bytes.len());
    let t = &file.tensors()[0];
    assert_eq!(file.tensor_data(t), &bytes[layout.tensor_data[0].clone()]);
    for t in file.tensors() {
        let address = file.tensor_data(t).as_ptr() as usize;
        assert_eq!(
            address % file.alignment(),
            0,
            "{} is not aligned in memory",
            t.name
        );
    }

    let empty = dir.join("empty.gguf");
    std::fs::write(&empty, b"").unwrap();
    assert!(
        GgufFile::open(&empty)
            .unwrap_err()
            .to_string()
            .contains("header: magic")
    );
    let missing = GgufFile::open(&dir.join("nope.gguf"))
        .unwrap_err()
        .to_string();
    assert!(
        missing.starts_with("cannot read ") && missing.contains("nope.gguf"),
        "{missing}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn gguf_file_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<GgufFile>();
}
