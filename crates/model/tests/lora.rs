//! LoRA adapters end to end on the model side. For tiny random models (llama, Gemma 3, Qwen2's
//! biased q/k/v) and the real SmolLM2, with random adapters of ranks 4-64 made here (GGUF and
//! PEFT): the logits with the adapter equal those of a model whose weights were merged in f32
//! (the targeted matrices dequantized, plus `scale * B A`, in both models), within 1e-3 of the
//! largest logit, and greedy tokens agree. A request with adapter X gives bit-identical logits
//! alone, next to base-only requests, and next to adapters Y and Z. Every malformed adapter is
//! refused with an error naming what is wrong. The real models are loaded once each.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::path::Path;
use std::sync::Arc;

use pagoda_gguf::{GgmlType, GgufAssembly, GgufFile};
use pagoda_hf::{LoraBase, convert_lora};
use pagoda_kernels::quant::dequantize_row;
use pagoda_model::lora::LoraWeights;
use pagoda_model::{
    CpuExecutor, ForwardBatch, Logits, LoraAdapter, LoraError, LoraOptions, Model, ModelConfig,
    SeqChunk,
};
use pagoda_testkit::lora_adapter::{
    ALL_STEMS, LoraTensor, PeftOptions, RandomLora, adapter_header, add_lora_tensors, gguf_adapter,
    projection_shapes, write_peft,
};
use pagoda_testkit::tiny_model::TinyModel;

const BLOCK: usize = 16;

fn shapes(c: &ModelConfig) -> Vec<(&'static str, usize, usize)> {
    projection_shapes(c.d_model, c.q_dim(), c.kv_dim(), c.ffn_dim)
}

fn random_tensors(
    c: &ModelConfig,
    rank: usize,
    stems: &[&'static str],
    seed: u64,
) -> (RandomLora, Vec<LoraTensor>) {
    let r = RandomLora::new(rank, stems, seed);
    let t = r.tensors(c.n_layers, &shapes(c));
    (r, t)
}

fn gguf_of(c: &ModelConfig, alpha: f32, tensors: &[LoraTensor], ty: GgmlType) -> GgufFile {
    let bytes = gguf_adapter(c.architecture.name(), alpha, tensors, ty).to_bytes();
    GgufFile::from_bytes(bytes).unwrap()
}

fn load(c: &ModelConfig, file: &GgufFile) -> Result<LoraAdapter, LoraError> {
    LoraAdapter::from_gguf(file, c, &LoraOptions::default())
}

/// `base` with every matrix stored as f32 (dequantized, the token embedding too), plus the
/// adapter's `scale * B A` where it changes one when `merge`. With every matmul in f32 no
/// activation is quantized, whose rounding would turn the last-bit differences of two correct
/// summation orders into visible ones.
fn with_f32_targets(base: &GgufFile, adapter: &LoraAdapter, merge: bool) -> GgufFile {
    let mut out = GgufAssembly::new();
    for (k, v) in base.metadata() {
        out.kv(k, v.clone());
    }
    for t in base.tensors() {
        let part = adapter
            .parts()
            .find(|(il, target, _)| t.name == format!("blk.{il}.{}.weight", target.gguf_stem()));
        let data = base.tensor_data(t);
        match part {
            None if t.dims.len() != 2 => out.tensor(&t.name, &t.dims, t.ty, data).unwrap(),
            w => {
                let cols = t.dims[0] as usize;
                let rows = t.dims[1] as usize;
                let mut values = vec![0f32; rows * cols];
                let rb = data.len() / rows;
                for (src, dst) in data.chunks_exact(rb).zip(values.chunks_exact_mut(cols)) {
                    dequantize_row(t.ty, src, dst);
                }
                if let (true, Some((_, _, w))) = (merge, w) {
                    add_delta(w, &mut values);
                }
                let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
                out.tensor(&t.name, &t.dims, GgmlType::F32, &bytes).unwrap();
            }
        }
    }
    out.finish()
}

/// Adds `scale * B A` to `values` (`[out][in]`): each entry summed in f64 over the rank in
/// order, as `LoraWeights::delta` sums it, but a row of A at a time; delta's strided walk per
/// entry was two thirds of a real model's check.
fn add_delta(w: &LoraWeights, values: &mut [f32]) {
    let m = w.mats();
    let d_in = m.a.len() / m.rank;
    let d_out = m.bt.len() / m.rank;
    let mut acc = vec![0f64; d_in];
    for (o, row) in values.chunks_exact_mut(d_in).enumerate() {
        acc.fill(0.0);
        for (a, bt) in m.a.chunks_exact(d_in).zip(m.bt.chunks_exact(d_out)) {
            let b = f64::from(bt[o]);
            for (s, &x) in acc.iter_mut().zip(a) {
                *s += b * f64::from(x);
            }
        }
        for (v, s) in row.iter_mut().zip(&acc) {
            *v += (f64::from(m.scale) * s) as f32;
        }
    }
}

fn exec(model: Model) -> CpuExecutor {
    CpuExecutor::new(model, 64, BLOCK).unwrap()
}

/// Logits of every position of `tokens` (one chunk) then `steps` greedy tokens, with
/// `adapter` (or none) on blocks starting at `first_block`.
fn run(
    exec: &mut CpuExecutor,
    tokens: &[u32],
    steps: usize,
    adapter: Option<&Arc<LoraAdapter>>,
) -> (Vec<f32>, Vec<u32>) {
    let vocab = exec.vocab_size();
    let table: Vec<u32> = (0..((tokens.len() + steps) / BLOCK + 1) as u32).collect();
    let adapters: Vec<Arc<LoraAdapter>> = adapter.into_iter().cloned().collect();
    let mut seq = tokens.to_vec();
    let mut logits = Vec::new();
    let mut greedy = Vec::new();
    let mut start = 0;
    for _ in 0..=steps {
        let mut batch = ForwardBatch::from_seqs(
            &[SeqChunk {
                tokens: &seq[start..],
                start,
                block_tables: std::slice::from_ref(&table),
                logits: if start == 0 {
                    Logits::All
                } else {
                    Logits::Last
                },
            }],
            BLOCK,
        );
        if adapter.is_some() {
            batch.seq_loras = vec![Some(0)];
        }
        let out = exec.forward_with_loras(&batch, &adapters).unwrap();
        if start == 0 {
            logits.extend_from_slice(out);
        }
        let last = &out[out.len() - vocab..];
        let next = (0..vocab)
            .max_by(|&a, &b| last[a].total_cmp(&last[b]))
            .unwrap() as u32;
        greedy.push(next);
        start = seq.len();
        seq.push(next);
    }
    (logits, greedy)
}

/// Checks the adapter on `base` against merged weights; returns (adapter effect, error).
fn check_merged(
    base: &GgufFile,
    adapter: LoraAdapter,
    tokens: &[u32],
    steps: usize,
    tol: f32,
) -> (f32, f32) {
    let adapter = Arc::new(adapter);
    let f32_base = Arc::new(with_f32_targets(base, &adapter, false));
    let merged = Arc::new(with_f32_targets(base, &adapter, true));
    let mut with_lora = exec(Model::load(f32_base).unwrap());
    let mut reference = exec(Model::load(merged).unwrap());
    let (lora_logits, lora_tokens) = run(&mut with_lora, tokens, steps, Some(&adapter));
    let (base_logits, _) = run(&mut with_lora, tokens, 0, None);
    let (merged_logits, merged_tokens) = run(&mut reference, tokens, steps, None);
    let (err, mag) = common::max_diff(&lora_logits, &merged_logits);
    let (effect, _) = common::max_diff(&lora_logits, &base_logits);
    assert!(
        err <= tol * mag,
        "adapter vs merged: {err} (largest logit {mag})"
    );
    assert!(
        effect > 20.0 * err,
        "the adapter barely changes the logits: {effect} vs error {err}"
    );
    assert_eq!(
        lora_tokens, merged_tokens,
        "greedy tokens differ from the merged model's"
    );
    (effect, err)
}

fn tiny_file(spec: &TinyModel) -> GgufFile {
    GgufFile::from_bytes(spec.to_bytes()).unwrap()
}

#[test]
fn tiny_models_with_an_adapter_equal_merged_weights() {
    let tokens = common::prompt(40, 1, 250, 3);
    for (spec, rank, stems, ty) in [
        (TinyModel::llama(), 4, &ALL_STEMS[..], GgmlType::F32),
        (TinyModel::llama(), 64, &ALL_STEMS[..4], GgmlType::F16),
        (TinyModel::gemma3(), 32, &ALL_STEMS[..], GgmlType::Q8_0),
        (
            TinyModel::gemma3(),
            8,
            &["attn_v", "ffn_down"][..],
            GgmlType::BF16,
        ),
        // Qwen2's q/k/v carry biases: the adapter's delta adds to a biased projection.
        (TinyModel::qwen2(), 16, &ALL_STEMS[..], GgmlType::F16),
    ] {
        let base = tiny_file(&spec);
        let c = ModelConfig::from_gguf(&base).unwrap();
        let (r, t) = random_tensors(&c, rank, stems, 7 + rank as u64);
        let adapter = load(&c, &gguf_of(&c, r.alpha * 2.0, &t, ty)).unwrap();
        assert_eq!(adapter.max_rank(), rank);
        check_merged(&base, adapter, &tokens, 6, 1e-3);
    }
}

#[test]
fn peft_directories_give_the_gguf_adapter() {
    let dir = tempdir("peft");
    for (spec, fan_in_fan_out) in [
        (TinyModel::llama(), false),
        (TinyModel::llama(), true),
        (TinyModel::gemma3(), false),
        // Hugging Face's qwen2 names, which GGUF stores unpermuted (no llama RoPE reordering).
        (TinyModel::qwen2(), false),
    ] {
        let base = tiny_file(&spec);
        let c = ModelConfig::from_gguf(&base).unwrap();
        let (r, t) = random_tensors(&c, 8, &ALL_STEMS, 11);
        let llama = c.architecture.name() == "llama";
        let opts = PeftOptions {
            llama_rope: llama.then_some((c.n_heads, c.n_kv_heads)),
            use_rslora: false,
            fan_in_fan_out,
        };
        write_peft(&dir, r.rank, r.alpha, &t, opts).unwrap();
        let peft = load(&c, &convert_lora(&dir, lora_base(&c)).unwrap()).unwrap();
        let gguf = load(&c, &gguf_of(&c, r.alpha, &t, GgmlType::F32)).unwrap();
        // The same weights, names, layout and scale: the same adapter, to the bit.
        assert_eq!(
            peft.digest(),
            gguf.digest(),
            "{} fan_in_fan_out={fan_in_fan_out}",
            c.architecture.name()
        );
    }
    // rsLoRA scales by alpha / sqrt(r): the same scale as the GGUF alpha it was written for.
    let base = tiny_file(&TinyModel::llama());
    let c = ModelConfig::from_gguf(&base).unwrap();
    let (r, t) = random_tensors(&c, 16, &ALL_STEMS[..2], 12);
    let opts = PeftOptions {
        llama_rope: Some((c.n_heads, c.n_kv_heads)),
        use_rslora: true,
        fan_in_fan_out: false,
    };
    write_peft(&dir, r.rank, 8.0, &t, opts).unwrap();
    let peft = load(&c, &convert_lora(&dir, lora_base(&c)).unwrap()).unwrap();
    let (_, _, w) = peft.parts().next().unwrap();
    assert!((w.scale() - 8.0 / 16.0).abs() < 1e-6, "scale {}", w.scale());
    check_merged(&base, peft, &common::prompt(20, 1, 250, 4), 3, 1e-3);
    std::fs::remove_dir_all(&dir).ok();
}

fn lora_base(c: &ModelConfig) -> LoraBase<'static> {
    LoraBase {
        architecture: c.architecture.name(),
        n_heads: c.n_heads,
        n_kv_heads: c.n_kv_heads,
    }
}

fn tempdir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("pagoda-lora-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Logits rows of sequence `which` when `seqs` (tokens, adapter index) run in one step, each
/// on its own blocks.
fn step_rows(
    exec: &mut CpuExecutor,
    seqs: &[(&[u32], Option<u32>)],
    adapters: &[Arc<LoraAdapter>],
    which: usize,
) -> Vec<f32> {
    let tables: Vec<Vec<u32>> = (0..seqs.len())
        .map(|i| (i as u32 * 4..i as u32 * 4 + 4).collect())
        .collect();
    let chunks: Vec<SeqChunk> = seqs
        .iter()
        .zip(&tables)
        .map(|((t, _), table)| SeqChunk {
            tokens: t,
            start: 0,
            block_tables: std::slice::from_ref(table),
            logits: Logits::All,
        })
        .collect();
    let mut batch = ForwardBatch::from_seqs(&chunks, BLOCK);
    batch.seq_loras = seqs.iter().map(|(_, l)| *l).collect();
    let vocab = exec.vocab_size();
    let out = exec.forward_with_loras(&batch, adapters).unwrap();
    let start: usize = seqs[..which].iter().map(|(t, _)| t.len()).sum();
    out[start * vocab..(start + seqs[which].0.len()) * vocab].to_vec()
}

#[test]
fn an_adapters_rows_do_not_depend_on_the_batch() {
    let base = tiny_file(&TinyModel::llama());
    let c = ModelConfig::from_gguf(&base).unwrap();
    let mk = |seed, stems: &[&'static str]| {
        let (r, t) = random_tensors(&c, 8, stems, seed);
        Arc::new(load(&c, &gguf_of(&c, r.alpha, &t, GgmlType::F32)).unwrap())
    };
    let (x, y, z) = (
        mk(1, &ALL_STEMS),
        mk(2, &ALL_STEMS[..4]),
        mk(3, &ALL_STEMS[4..]),
    );
    let mut e = exec(Model::load(Arc::new(base)).unwrap());
    let px = common::prompt(21, 1, 250, 1);
    let (p1, p2, p3) = (
        common::prompt(7, 1, 250, 2),
        common::prompt(33, 1, 250, 3),
        common::prompt(1, 1, 250, 4),
    );
    let alone = step_rows(&mut e, &[(&px, Some(0))], std::slice::from_ref(&x), 0);
    let with_base = step_rows(
        &mut e,
        &[(&p1, None), (&px, Some(0)), (&p2, None)],
        std::slice::from_ref(&x),
        1,
    );
    let with_others = step_rows(
        &mut e,
        &[
            (&p1, Some(1)),
            (&p3, Some(2)),
            (&px, Some(0)),
            (&p2, Some(1)),
        ],
        &[x.clone(), y.clone(), z.clone()],
        2,
    );
    assert_eq!(alone, with_base);
    assert_eq!(alone, with_others);
    let base_only = step_rows(&mut e, &[(&px, None)], &[], 0);
    assert_ne!(alone, base_only);
}

#[test]
fn the_digest_follows_the_content() {
    let base = tiny_file(&TinyModel::llama());
    let c = ModelConfig::from_gguf(&base).unwrap();
    let (r, mut t) = random_tensors(&c, 4, &ALL_STEMS[..1], 5);
    let d1 = load(&c, &gguf_of(&c, r.alpha, &t, GgmlType::F32))
        .unwrap()
        .digest();
    assert_eq!(
        d1,
        load(&c, &gguf_of(&c, r.alpha, &t, GgmlType::F32))
            .unwrap()
            .digest()
    );
    assert_ne!(
        d1,
        load(&c, &gguf_of(&c, r.alpha * 2.0, &t, GgmlType::F32))
            .unwrap()
            .digest()
    );
    t[0].b[3] += 0.25;
    assert_ne!(
        d1,
        load(&c, &gguf_of(&c, r.alpha, &t, GgmlType::F32))
            .unwrap()
            .digest()
    );
}

#[test]
fn malformed_adapters_are_refused_by_name() {
    let base = tiny_file(&TinyModel::llama());
    let c = ModelConfig::from_gguf(&base).unwrap();
    let (_, t) = random_tensors(&c, 4, &["attn_q"], 9);
    let good = || gguf_adapter("llama", 4.0, &t[..1], GgmlType::F32);
    let refuse = |w: pagoda_testkit::gguf_writer::GgufWriter, needle: &str| {
        let e = load(&c, &GgufFile::from_bytes(w.to_bytes()).unwrap()).unwrap_err();
        assert!(e.to_string().contains(needle), "{e} lacks {needle:?}");
    };
    let header = |arch, gt, at| {
        let w = adapter_header(arch, gt, at).kv("adapter.lora.alpha", 4.0f32);
        add_lora_tensors(w, &t[..1], GgmlType::F32)
    };
    refuse(header("llama", "model", "lora"), "general.type");
    refuse(header("llama", "adapter", "ia3"), "adapter.type");
    refuse(
        header("gemma3", "adapter", "lora"),
        "architecture \"gemma3\"",
    );
    refuse(
        good().tensor(
            "blk.0.attn_q.weight.lora_c",
            &[4],
            GgmlType::F32,
            vec![0; 16],
        ),
        "blk.0.attn_q.weight.lora_c",
    );
    refuse(
        good().tensor(
            "blk.9.attn_q.weight.lora_a",
            &[4],
            GgmlType::F32,
            vec![0; 16],
        ),
        "blk.9.attn_q.weight.lora_a",
    );
    refuse(
        good().tensor("token_embd.weight.lora_a", &[4], GgmlType::F32, vec![0; 16]),
        "embeddings",
    );
    refuse(
        good().tensor("output.weight.lora_b", &[4], GgmlType::F32, vec![0; 16]),
        "LM head",
    );
    let d = c.d_model as u64;
    refuse(
        good().tensor(
            "blk.1.attn_v.weight.lora_a",
            &[d, 4],
            GgmlType::F32,
            vec![0; 16 * d as usize],
        ),
        "blk.1.attn_v.weight.lora_b",
    );
    let mk = |ty, dims_a: [u64; 2], dims_b: [u64; 2]| {
        let (na, nb) = (
            (dims_a[0] * dims_a[1]) as usize,
            (dims_b[0] * dims_b[1]) as usize,
        );
        gguf_adapter("llama", 4.0, &[], GgmlType::F32)
            .tensor(
                "blk.0.attn_q.weight.lora_a",
                &dims_a,
                ty,
                vec![0; pagoda_testkit::gguf_writer::tensor_bytes(&dims_a, ty)],
            )
            .tensor(
                "blk.0.attn_q.weight.lora_b",
                &dims_b,
                ty,
                vec![0; pagoda_testkit::gguf_writer::tensor_bytes(&dims_b, ty)],
            )
            .kv("x.sizes", format!("{na} {nb}").as_str())
    };
    refuse(
        mk(GgmlType::Q4_0, [d, 32], [32, d]),
        "unsupported type Q4_0",
    );
    refuse(
        mk(GgmlType::F32, [d + 1, 4], [4, d]),
        "blk.0.attn_q.weight.lora_a",
    );
    refuse(
        mk(GgmlType::F32, [d, 4], [5, d]),
        "blk.0.attn_q.weight.lora_b",
    );
    let e = LoraAdapter::from_gguf(
        &GgufFile::from_bytes(mk(GgmlType::F32, [d, 32], [32, d]).to_bytes()).unwrap(),
        &c,
        &LoraOptions {
            scale: 1.0,
            max_rank: 16,
        },
    )
    .unwrap_err();
    assert!(
        matches!(
            e,
            LoraError::RankTooLarge {
                rank: 32,
                max: 16,
                ..
            }
        ),
        "{e}"
    );
    refuse(
        gguf_adapter("llama", 4.0, &[], GgmlType::F32),
        "no LoRA tensors",
    );
    let mut nan = t[..1].to_vec();
    nan[0].a[0] = f32::NAN;
    refuse(
        gguf_adapter("llama", 4.0, &nan, GgmlType::F32),
        "not finite",
    );
}

#[test]
fn malformed_peft_directories_are_refused_by_name() {
    let base = tiny_file(&TinyModel::llama());
    let c = ModelConfig::from_gguf(&base).unwrap();
    let (r, t) = random_tensors(&c, 4, &["attn_q"], 9);
    let dir = tempdir("bad-peft");
    let opts = PeftOptions {
        llama_rope: Some((c.n_heads, c.n_kv_heads)),
        use_rslora: false,
        fan_in_fan_out: false,
    };
    let refuse = |edit: &dyn Fn(&Path), needle: &str| {
        write_peft(&dir, r.rank, r.alpha, &t, opts).unwrap();
        edit(&dir);
        let e = convert_lora(&dir, lora_base(&c)).unwrap_err();
        assert!(e.to_string().contains(needle), "{e} lacks {needle:?}");
    };
    let config_edit = |key: &'static str, value: serde_json::Value| {
        move |d: &Path| {
            let p = d.join("adapter_config.json");
            let mut v: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
            v[key] = value.clone();
            std::fs::write(&p, v.to_string()).unwrap();
        }
    };
    refuse(&config_edit("use_dora", true.into()), "DoRA");
    refuse(&config_edit("bias", "all".into()), "bias");
    refuse(
        &config_edit("modules_to_save", serde_json::json!(["lm_head"])),
        "modules_to_save",
    );
    refuse(
        &config_edit("r", 8.into()),
        "rank 4 but adapter_config.json says r = 8",
    );
    let a0 = t[0].a.clone();
    let d_model = c.d_model;
    let extra = |name: &'static str| {
        let a0 = a0.clone();
        move |d: &Path| {
            let mut tensors = vec![(name.to_string(), vec![4, 4], vec![0f32; 16])];
            tensors.push((
                "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight".into(),
                vec![4, d_model],
                a0.clone(),
            ));
            pagoda_testkit::hf_checkpoint::write_safetensors(
                &d.join("adapter_model.safetensors"),
                &tensors,
            )
            .unwrap();
        }
    };
    refuse(&extra("base_model.model.lm_head.lora_A.weight"), "LM head");
    refuse(
        &extra("base_model.model.model.layers.0.self_attn.rotary.lora_A.weight"),
        "rotary",
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// The real SmolLM2 (every matrix, the tied embedding too, in f32 on both sides, so no
/// activation is quantized and the bound is the tiny models' 1e-3 of the largest logit) with a
/// rank-16 adapter on every projection: logits and greedy tokens of the merged model. (With the
/// embedding kept quantized, the LM head rounds its input to 8 bits and the error moves with the
/// last bits of the adapter's sums: 0.06 to 0.2 between two correct kernels.)
#[test]
fn smollm2_with_an_adapter_equals_merged_weights() {
    let path = common::model_dir().join(common::SMOLLM2);
    let base = GgufFile::open(&path).unwrap();
    let c = ModelConfig::from_gguf(&base).unwrap();
    let (r, t) = random_tensors(&c, 16, &ALL_STEMS, 21);
    let file = gguf_of(&c, r.alpha, &t, GgmlType::F16);
    let started = std::time::Instant::now();
    let adapter = load(&c, &file).unwrap();
    // Reported in docs/benchmarks.md (measured, never asserted).
    eprintln!(
        "SmolLM2 rank-16 adapter on all projections: {:.1} ms to load (in memory), {} bytes",
        started.elapsed().as_secs_f64() * 1e3,
        adapter.memory_bytes()
    );
    let tokens = common::prompt(24, 10, 40000, 5);
    let (effect, err) = check_merged(&base, adapter, &tokens, 4, 1e-3);
    eprintln!("SmolLM2 rank 16: adapter effect {effect}, error vs merged {err}");
}
