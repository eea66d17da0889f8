#![allow(clippy::unwrap_used)]

use pagoda_gguf::{GgufAssembly, MetaValue};

use super::*;

fn gguf(keys: &[(&str, MetaValue)]) -> GgufFile {
    let mut a = GgufAssembly::new();
    a.kv("general.architecture", MetaValue::String("llama".into()));
    for (k, v) in keys {
        a.kv(k, v.clone());
    }
    a.finish()
}

#[test]
fn generation_config_json_gives_vllms_keys() {
    let text = r#"{"bos_token_id": 1, "do_sample": true, "temperature": 0.7, "top_p": 0.8,
        "top_k": 20, "repetition_penalty": 1.05, "min_p": null, "max_new_tokens": 512,
        "eos_token_id": [2, 3]}"#;
    let d = SamplingDefaults::from_json(text, "gc.json").unwrap();
    assert_eq!(d.temperature, Some(0.7));
    assert_eq!(d.top_p, Some(0.8));
    assert_eq!(d.top_k, Some(20));
    assert_eq!(d.repetition_penalty, Some(1.05));
    assert_eq!(d.min_p, None);
    assert_eq!(d.max_tokens, Some(512));
    assert_eq!(d.source, DefaultsSource::File("gc.json".into()));
    assert_eq!(
        serde_json::to_value(&d).unwrap(),
        serde_json::json!({"temperature": 0.7, "top_p": 0.8, "top_k": 20,
            "repetition_penalty": 1.05, "max_tokens": 512, "source": "file:gc.json"})
    );
    // A file with token ids only recommends nothing.
    let d = SamplingDefaults::from_json(r#"{"bos_token_id": 1, "eos_token_id": 2}"#, "x").unwrap();
    assert!(d.is_empty());
}

#[test]
fn bad_json_values_are_named() {
    let e = SamplingDefaults::from_json(r#"{"top_k": "many"}"#, "gc.json").unwrap_err();
    assert_eq!(e.to_string(), "gc.json: `top_k` must be an integer");
    let e = SamplingDefaults::from_json("[1]", "gc.json").unwrap_err();
    assert!(e.to_string().contains("not a JSON object"), "{e}");
}

#[test]
fn gguf_general_sampling_keys_are_read() {
    let f = gguf(&[
        ("general.sampling.temp", MetaValue::F32(0.6)),
        ("general.sampling.top_k", MetaValue::U32(20)),
        ("general.sampling.top_p", MetaValue::F32(0.95)),
        ("general.sampling.min_p", MetaValue::F64(0.0)),
        ("general.sampling.penalty_repeat", MetaValue::F32(1.05)),
    ]);
    let d = SamplingDefaults::from_gguf(&f).unwrap();
    assert_eq!(d.temperature, Some(0.6));
    assert_eq!(d.top_k, Some(20));
    assert_eq!(d.top_p, Some(0.95));
    // A declared zero is a choice, kept as one.
    assert_eq!(d.min_p, Some(0.0));
    assert_eq!(d.repetition_penalty, Some(1.05));
    assert_eq!(d.source, DefaultsSource::Gguf);
    assert!(SamplingDefaults::from_gguf(&gguf(&[])).unwrap().is_empty());
}

#[test]
fn catalog_specs_parse_and_refuse_unknown_keys() {
    let d = SamplingDefaults::from_spec("temperature=0.7 top_k=20", DefaultsSource::None).unwrap();
    assert_eq!((d.temperature, d.top_k), (Some(0.7), Some(20)));
    assert!(SamplingDefaults::from_spec("warmth=1", DefaultsSource::None).is_err());
    assert!(SamplingDefaults::from_spec("top_p", DefaultsSource::None).is_err());
}
