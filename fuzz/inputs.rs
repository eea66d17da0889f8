// What each fuzz target does with its input, one function per target. The targets in
// fuzz_targets/ and the corpus replay test (crates/pagoda/tests/fuzz_corpus.rs) both include
// this file, so CI runs every kept corpus input through exactly what the campaigns ran: a
// panic or a failed assertion here is a bug.

#[allow(dead_code)]
mod inputs {
    use std::hint::black_box;

    /// `pagoda_gguf::GgufFile::from_bytes`, then every tensor's data and every typed getter.
    pub fn gguf_parse(data: &[u8]) {
        let Ok(file) = pagoda_gguf::GgufFile::from_bytes(data.to_vec()) else {
            return;
        };
        let file_len = file.file_len();
        for t in file.tensors() {
            let bytes = file.tensor_data(t);
            assert_eq!(bytes.len(), t.size, "{}", t.name);
            assert!(t.offset + t.size as u64 <= file_len);
            assert_eq!(t.offset % file.alignment() as u64, 0);
            assert!(t.n_elements() > 0);
            black_box(bytes.iter().fold(0u8, |acc, &b| acc ^ b));
            assert!(file.tensor(&t.name).is_some());
        }
        for (key, value) in file.metadata() {
            assert!(file.get(key).is_some());
            black_box(value.type_name());
            let _ = black_box(file.get_u32(key));
            let _ = black_box(file.get_i32(key));
            let _ = black_box(file.get_u64(key));
            let _ = black_box(file.get_i64(key));
            let _ = black_box(file.get_usize(key));
            let _ = black_box(file.get_f32(key));
            let _ = black_box(file.get_bool(key));
            let _ = black_box(file.get_str(key));
            let _ = black_box(file.get_array(key));
            let _ = black_box(file.get_str_array(key));
            let _ = black_box(file.get_f32_array(key));
            let _ = black_box(file.get_i32_array(key));
        }
        let _ = black_box(file.architecture());
        black_box((file.version(), file.data_offset()));
    }

    /// The KV transfer frame reader: every frame read back encodes to bytes that read back as
    /// the same frame.
    pub fn kv_frame(data: &[u8]) {
        use pagoda_model::kv::transfer::{Frame, Seal};
        let mut r = data;
        // The receiver's bounds: a Begin of at most 64 + 256 bytes, blocks of 32 + 4 KiB here.
        while let Ok(Some(f)) = Frame::read_from(&mut r, 32 + 4096, &mut Seal::Checksum) {
            let again = Frame::read_from(
                &mut &f.encode(&mut Seal::Checksum)[..],
                1 << 20,
                &mut Seal::Checksum,
            );
            assert!(matches!(again, Ok(Some(ref g)) if *g == f));
        }
    }

    /// The KV-event msgpack decoder.
    pub fn kv_events_decode(data: &[u8]) {
        let _ = pagoda_kv_events::decode_batch(data);
    }

    /// The `--api-keys-file` parser.
    pub fn keys_file(data: &[u8]) {
        if let Ok(text) = std::str::from_utf8(data) {
            let _ = pagoda_api_keys::keys_file::parse(text);
        }
    }

    /// A chat template compiled and rendered: the template, then a NUL, then the messages as
    /// JSON (one user message when they do not parse).
    pub fn chat_template(data: &[u8]) {
        use pagoda_frontend::{ChatTemplate, TemplateSource};
        let Ok(text) = std::str::from_utf8(data) else {
            return;
        };
        let (template, messages) = text.split_once('\0').unwrap_or((text, ""));
        let Ok(t) = ChatTemplate::new(template, TemplateSource::Gguf, "<s>", "</s>") else {
            return;
        };
        let messages = serde_json::from_str(messages)
            .unwrap_or_else(|_| serde_json::json!([{"role": "user", "content": "hi"}]));
        let _ = t.render_json(&messages, None, true);
    }

    /// The safetensors reader, through a file as the loader reads it (mapped).
    pub fn safetensors_header(data: &[u8]) {
        let dir = std::path::Path::new("/dev/shm");
        let dir = if dir.is_dir() {
            dir.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        let path = dir.join(format!("pagoda-fuzz-{}.safetensors", std::process::id()));
        if std::fs::write(&path, data).is_err() {
            return;
        }
        if let Ok(file) = pagoda_hf::SafetensorsFile::open(&path) {
            let names: Vec<String> = file.names().map(str::to_owned).collect();
            for name in names {
                if let Some(t) = file.tensor(&name) {
                    let _ = black_box(t.n_elements());
                    let _ = black_box(t.to_f32().len());
                }
            }
        }
        let _ = std::fs::remove_file(&path);
    }

    /// The tokenizer.json reader, then an encode and a decode.
    pub fn tokenizer_json(data: &[u8]) {
        let Ok(text) = std::str::from_utf8(data) else {
            return;
        };
        if let Ok(tok) = pagoda_frontend::HfTokenizer::from_json(text)
            && let Ok(ids) = tok.encode("The quick brown fox, 123 ünïcode.")
        {
            let _ = black_box(tok.decode(&ids));
        }
    }
}
