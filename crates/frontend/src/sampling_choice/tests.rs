#![allow(clippy::unwrap_used)]

use pagoda_gguf::{GgufAssembly, MetaValue};

use super::*;
use crate::generation_config::DefaultsSource;

fn gguf(keys: &[(&str, MetaValue)]) -> GgufFile {
    let mut a = GgufAssembly::new();
    a.kv("general.architecture", MetaValue::String("llama".into()));
    for (k, v) in keys {
        a.kv(k, v.clone());
    }
    a.finish()
}

#[test]
fn the_choice_picks_the_model_file_then_the_catalog() {
    let dir = std::env::temp_dir().join(format!("pagoda-gencfg-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let empty = gguf(&[]);
    let keyed = gguf(&[("general.sampling.temp", MetaValue::F32(0.3))]);
    let qwen = Path::new("/nowhere/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf");

    // auto: the file's keys, else the catalog entry of the file's name, else nothing.
    let auto = GenerationConfigChoice::Auto;
    let d = auto.defaults_for(qwen, &keyed).unwrap();
    assert_eq!((d.temperature, d.source), (Some(0.3), DefaultsSource::Gguf));
    let d = auto.defaults_for(qwen, &empty).unwrap();
    assert_eq!(d.temperature, Some(0.7));
    assert!(matches!(d.source, DefaultsSource::Catalog(_)));
    let d = auto
        .defaults_for(Path::new("/x/other.gguf"), &empty)
        .unwrap();
    assert_eq!(d, SamplingDefaults::default());

    // auto on a checkpoint directory: its generation_config.json first.
    let json = dir.join("generation_config.json");
    std::fs::write(&json, r#"{"temperature": 0.4, "top_k": 5}"#).unwrap();
    let d = auto.defaults_for(&dir, &keyed).unwrap();
    assert_eq!((d.temperature, d.top_k), (Some(0.4), Some(5)));

    // none: nothing, whatever the model says; FILE: that file only.
    let none = "none".parse::<GenerationConfigChoice>().unwrap();
    assert_eq!(
        none.defaults_for(qwen, &keyed).unwrap(),
        SamplingDefaults::default()
    );
    let file: GenerationConfigChoice = json.display().to_string().parse().unwrap();
    let d = file.defaults_for(qwen, &keyed).unwrap();
    assert_eq!(d.top_k, Some(5));
    let missing = GenerationConfigChoice::File(dir.join("missing.json"));
    let e = missing.defaults_for(qwen, &keyed).unwrap_err();
    assert!(e.to_string().contains("missing.json"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}
