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
        let path = scratch_root().join(format!("pagoda-fuzz-{}.safetensors", std::process::id()));
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

    /// /dev/shm when there is one (no disk writes per input), else the temp dir.
    fn scratch_root() -> std::path::PathBuf {
        let shm = std::path::Path::new("/dev/shm");
        if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        }
    }

    /// A scratch directory of this process under [`scratch_root`], emptied.
    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = scratch_root().join(format!("pagoda-fuzz-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::create_dir_all(&dir);
        dir
    }

    /// A safetensors file with no tensors: a checkpoint's or adapter's weights, so the loader
    /// gets past them to the JSON under test.
    const EMPTY_SAFETENSORS: &[u8] = b"\x02\x00\x00\x00\x00\x00\x00\x00{}";

    /// A checkpoint's config.json (beside empty weights) through the converter, as `pagoda
    /// serve --model DIR` reads it: `HfConfig::read`, `check`, the architecture, the GGUF
    /// metadata it derives, then the weights and tokenizer it asks for.
    pub fn hf_config(data: &[u8]) {
        let dir = scratch("hf-config");
        if std::fs::write(dir.join("config.json"), data).is_err()
            || std::fs::write(dir.join("model.safetensors"), EMPTY_SAFETENSORS).is_err()
        {
            return;
        }
        if let Ok(gguf) = pagoda_hf::convert(&dir, pagoda_hf::Quantization::default()) {
            let _ = black_box(gguf.architecture());
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A PEFT adapter_config.json (beside empty weights) through the adapter converter, for
    /// a llama base of 4 heads and 2 KV heads.
    pub fn peft_config(data: &[u8]) {
        let dir = scratch("peft-config");
        if std::fs::write(dir.join("adapter_config.json"), data).is_err()
            || std::fs::write(dir.join("adapter_model.safetensors"), EMPTY_SAFETENSORS).is_err()
        {
            return;
        }
        let base = pagoda_hf::LoraBase {
            architecture: "llama",
            n_heads: 4,
            n_kv_heads: 2,
        };
        if let Ok(gguf) = pagoda_hf::convert_lora(&dir, base) {
            let alpha = gguf.get_f32("adapter.lora.alpha");
            assert!(matches!(alpha, Ok(Some(a)) if a.is_finite()), "{alpha:?}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The disk tier over `dir` that the target and its seed open.
    fn disk_config(dir: &std::path::Path) -> pagoda_model::KvDiskConfig {
        pagoda_model::KvDiskConfig {
            dir: dir.to_path_buf(),
            max_bytes: 1 << 30,
            model_identity: KV_DISK_MODEL.into(),
            read_bytes_per_sec: None,
            prefill_tokens_per_sec: None,
        }
    }

    /// The KV cache of a tiny llama (2 layers, 2 KV heads of 64, blocks of 4: 4 KiB files):
    /// the layout the disk tier's files are checked against.
    fn tiny_kv() -> &'static pagoda_model::KvCache {
        static KV: std::sync::OnceLock<pagoda_model::KvCache> = std::sync::OnceLock::new();
        KV.get_or_init(|| {
            let bytes = pagoda_testkit::tiny_model::TinyModel::llama().to_bytes();
            let file = pagoda_gguf::GgufFile::from_bytes(bytes).expect("the tiny model parses");
            let config = pagoda_model::ModelConfig::from_gguf(&file).expect("its config");
            pagoda_model::KvCache::new(&config, 2, 4).expect("a small KV cache")
        })
    }

    /// The key every fuzzed block file is filed under (and named after).
    pub const KV_DISK_KEY: [u8; 32] = [0x5a; 32];
    /// The model identity the fuzzed tier is opened for (part of the files' layout digest).
    pub const KV_DISK_MODEL: &str = "fuzz-model";

    /// A disk-tier block file, as a server finds it in its `--kv-disk-dir` at start-up: the
    /// tier opens the directory (the scan checks each header and deletes unusable files),
    /// then, if the file was kept, reads the block back (the checksum is checked): a block
    /// read is exactly one payload long.
    pub fn kv_disk_block(data: &[u8]) -> bool {
        use pagoda_core::kv::{BlockHash, KvGroup, KvTier};
        let kv = tiny_kv();
        let dir = scratch("kv-disk");
        let hex: String = KV_DISK_KEY.iter().map(|b| format!("{b:02x}")).collect();
        if std::fs::write(dir.join(format!("{hex}.kvb")), data).is_err() {
            return false;
        }
        let config = disk_config(&dir);
        let Ok(tier) = pagoda_model::DiskTier::open(&config, kv, &[KvGroup::FULL], 1000.0) else {
            return false;
        };
        let key = BlockHash(KV_DISK_KEY);
        let mut read_back = false;
        if tier.contains(&key) {
            let ticket = tier.prefetch(vec![key]);
            let read = loop {
                if let Some(n) = tier.poll(ticket) {
                    break n;
                }
                std::thread::yield_now();
            };
            for (k, payload) in tier.take_read(ticket) {
                assert!(read == 1 && k == key);
                assert_eq!(payload.len(), tier.payload_len());
                read_back = true;
            }
        }
        drop(tier);
        let _ = std::fs::remove_dir_all(&dir);
        read_back
    }

    /// A sound block file of [`kv_disk_block`]'s layout (written by the tier itself): the
    /// campaign's seed, and the replay test's proof that the target reads what it should.
    pub fn kv_disk_seed() -> Vec<u8> {
        use pagoda_core::kv::{BlockHash, KvGroup};
        let kv = tiny_kv();
        let dir = scratch("kv-disk-seed");
        let config = disk_config(&dir);
        let mut tier = pagoda_model::DiskTier::open(&config, kv, &[KvGroup::FULL], 1000.0)
            .expect("a tier in a fresh directory");
        let mut payload = Vec::new();
        kv.read_block(0, &mut payload);
        tier.save_blocking(BlockHash(KV_DISK_KEY), payload);
        tier.close();
        let hex: String = KV_DISK_KEY.iter().map(|b| format!("{b:02x}")).collect();
        let file = std::fs::read(dir.join(format!("{hex}.kvb"))).expect("the block written");
        let _ = std::fs::remove_dir_all(&dir);
        file
    }

    /// SmolLM2's structured-output compiler (its 49k-token trie, built once): the model
    /// every server test loads.
    fn structured() -> &'static pagoda_structured::StructuredOutputs {
        static SO: std::sync::OnceLock<pagoda_structured::StructuredOutputs> =
            std::sync::OnceLock::new();
        SO.get_or_init(|| {
            let gguf = pagoda_gguf::GgufFile::open(&smollm2())
                .expect("SmolLM2 (scripts/fetch-models.sh)");
            let tok = pagoda_frontend::Tokenizer::from_gguf(&gguf).expect("its tokenizer");
            pagoda_structured::StructuredOutputs::new(std::sync::Arc::new(tok))
        })
    }

    /// A constraint compiled as a request's is (`StructuredOutputs::compile`: llguidance under
    /// pagoda's parser limits, the first step rehearsed), then a matcher's first masks: the
    /// first byte picks the kind (JSON schema, regex, Lark grammar, choices one per line), the
    /// rest is its text.
    pub fn structured_compile(data: &[u8]) {
        use pagoda_structured::Constraint;
        let Some((&kind, rest)) = data.split_first() else {
            return;
        };
        let Ok(text) = std::str::from_utf8(rest) else {
            return;
        };
        let c = match kind % 4 {
            0 => Constraint::JsonSchema(text.to_owned()),
            1 => Constraint::Regex(text.to_owned()),
            2 => Constraint::Grammar(text.to_owned()),
            _ => Constraint::Choice(text.lines().map(str::to_owned).collect()),
        };
        let Ok(compiled) = structured().compile(&c) else {
            return;
        };
        let mut m = compiled.matcher();
        // A few steps of the first allowed token, as sampling under the mask would take.
        for _ in 0..4 {
            if m.is_finished() || m.compute_mask().is_err() {
                break;
            }
            let vocab = structured().vocab_size() as u32;
            let Some(t) = (0..vocab).find(|&t| m.is_allowed(t).unwrap_or(false)) else {
                break;
            };
            if m.consume(t).is_err() {
                break;
            }
        }
    }

    /// A server state with SmolLM2 loaded as model `m` (16 MiB of KV), and a runtime for its
    /// async model lookup; made once per process.
    fn server() -> &'static (tokio::runtime::Runtime, pagoda_server::AppState) {
        static SERVER: std::sync::OnceLock<(tokio::runtime::Runtime, pagoda_server::AppState)> =
            std::sync::OnceLock::new();
        SERVER.get_or_init(|| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            let setup = pagoda_model::EngineSetup {
                kv_cache_memory: Some(16 << 20),
                max_model_len: Some(1024),
                ..pagoda_model::EngineSetup::default()
            };
            let config = pagoda_server::ServerConfig {
                served_model_name: "m".to_owned(),
                ..pagoda_server::ServerConfig::default()
            };
            let state = pagoda_server::load(&smollm2(), &setup, config).expect("SmolLM2 loads");
            (rt, state)
        })
    }

    /// SmolLM2's GGUF (`$PAGODA_MODEL_DIR`, else ~/.cache/pagoda/models).
    fn smollm2() -> std::path::PathBuf {
        let dir = match std::env::var_os("PAGODA_MODEL_DIR") {
            Some(d) => std::path::PathBuf::from(d),
            None => std::path::PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                .join(".cache/pagoda/models"),
        };
        dir.join("SmolLM2-135M-Instruct.Q4_1.gguf")
    }

    /// One API's request body through the server's own parse and prepare (what a request's
    /// handler runs before it submits anything): the body parsed into the API's wire type,
    /// the model looked up, then validation, chat template, tools, constraints and
    /// tokenization. Requests naming a `keep_alive` are skipped: they would unload the model.
    fn prepare<E: pagoda_server::generate::endpoint::GenerationEndpoint>(body: &[u8]) {
        use pagoda_server::http::body::WireRequest;
        let (rt, state) = server();
        let Ok(wire) = pagoda_server::http::body::parse::<E::Wire>(body) else {
            return;
        };
        if wire.keep_alive().is_some() {
            return;
        }
        let Ok(lease) = rt.block_on(state.model_for(&wire)) else {
            return;
        };
        if let Ok((req, _)) = E::prepare(state, &lease, wire) {
            assert!(req.num_prompts() >= 1);
            for i in 0..req.num_prompts() {
                black_box(req.prompt(i));
            }
        }
    }

    /// A request body of one of the three APIs, picked by the first byte: OpenAI chat
    /// completions, completions, Anthropic Messages, OpenAI Responses.
    pub fn api_request(data: &[u8]) {
        use pagoda_server::api;
        let Some((&which, body)) = data.split_first() else {
            return;
        };
        match which % 4 {
            0 => prepare::<api::openai::chat::Chat>(body),
            1 => prepare::<api::openai::completions::Completions>(body),
            2 => prepare::<api::anthropic::endpoint::Messages>(body),
            _ => prepare::<api::responses::endpoint::Responses>(body),
        }
    }
}
