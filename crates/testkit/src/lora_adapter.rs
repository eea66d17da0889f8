//! Random LoRA adapters for tests and benchmarks, written both ways pagoda reads them: a GGUF
//! adapter as llama.cpp's `convert_lora_to_gguf.py` writes it, and a PEFT directory
//! (`adapter_config.json` + `adapter_model.safetensors`, HF names, Llama q/k `lora_B` rows in
//! HF's RoPE order). The mapping is written here from PEFT's conventions, not pagoda-hf's.

use std::io;
use std::path::Path;

use pagoda_kernels::quant::{GgmlType, quantize_row};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::json;

use crate::gguf_writer::GgufWriter;
use crate::hf_checkpoint::{to_hf_rope_order, write_safetensors};

/// One projection's update in GGUF's terms: `base` is the GGUF weight name
/// (`blk.0.attn_q.weight`), A is `[rank][in]`, B is `[out][rank]`.
#[derive(Clone, Debug)]
pub struct LoraTensor {
    pub base: String,
    pub d_out: usize,
    pub d_in: usize,
    pub a: Vec<f32>,
    pub b: Vec<f32>,
}

/// A random adapter: `rank`, GGUF `alpha`, the projections it changes (GGUF stems such as
/// `attn_q`) on every layer, and the range of B's values (A's is `1 / sqrt(in)`).
#[derive(Clone, Debug)]
pub struct RandomLora {
    pub rank: usize,
    pub alpha: f32,
    pub stems: Vec<&'static str>,
    pub b_range: f32,
    pub seed: u64,
}

/// The shapes of a model's projections, from its hyper-parameters: `(stem, out, in)`.
pub fn projection_shapes(
    d_model: usize,
    q_dim: usize,
    kv_dim: usize,
    ffn_dim: usize,
) -> Vec<(&'static str, usize, usize)> {
    vec![
        ("attn_q", q_dim, d_model),
        ("attn_k", kv_dim, d_model),
        ("attn_v", kv_dim, d_model),
        ("attn_output", d_model, q_dim),
        ("ffn_gate", ffn_dim, d_model),
        ("ffn_up", ffn_dim, d_model),
        ("ffn_down", d_model, ffn_dim),
    ]
}

/// Every projection stem.
pub const ALL_STEMS: [&str; 7] = [
    "attn_q",
    "attn_k",
    "attn_v",
    "attn_output",
    "ffn_gate",
    "ffn_up",
    "ffn_down",
];

impl RandomLora {
    pub fn new(rank: usize, stems: &[&'static str], seed: u64) -> Self {
        Self {
            rank,
            alpha: rank as f32,
            stems: stems.to_vec(),
            b_range: 0.05,
            seed,
        }
    }

    /// Its tensors over `n_layers` layers of a model with `shapes` ([`projection_shapes`]).
    pub fn tensors(
        &self,
        n_layers: usize,
        shapes: &[(&'static str, usize, usize)],
    ) -> Vec<LoraTensor> {
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        let mut out = Vec::new();
        for il in 0..n_layers {
            for &(stem, d_out, d_in) in shapes {
                if !self.stems.contains(&stem) {
                    continue;
                }
                let ra = 1.0 / (d_in as f32).sqrt();
                let a = (0..self.rank * d_in)
                    .map(|_| rng.random_range(-ra..ra))
                    .collect();
                let rb = self.b_range;
                let b = (0..d_out * self.rank)
                    .map(|_| rng.random_range(-rb..rb))
                    .collect();
                out.push(LoraTensor {
                    base: format!("blk.{il}.{stem}.weight"),
                    d_out,
                    d_in,
                    a,
                    b,
                });
            }
        }
        out
    }
}

/// `values` (`[rows][cols]`) stored as `ty`.
fn encode(values: &[f32], cols: usize, ty: GgmlType) -> Vec<u8> {
    if ty == GgmlType::F32 {
        return values.iter().flat_map(|v| v.to_le_bytes()).collect();
    }
    let row_bytes = ty
        .row_bytes(cols)
        .expect("a type that holds rows of this width");
    let mut out = vec![0u8; row_bytes * (values.len() / cols)];
    for (src, dst) in values
        .chunks_exact(cols)
        .zip(out.chunks_exact_mut(row_bytes))
    {
        quantize_row(ty, src, dst);
    }
    out
}

/// A GGUF adapter file of `tensors` for architecture `arch`, tensors stored as `ty`.
pub fn gguf_adapter(arch: &str, alpha: f32, tensors: &[LoraTensor], ty: GgmlType) -> GgufWriter {
    let w = adapter_header(arch, "adapter", "lora").kv("adapter.lora.alpha", alpha);
    add_lora_tensors(w, tensors, ty)
}

/// An adapter file's identifying keys (tests vary each).
pub fn adapter_header(arch: &str, general_type: &str, adapter_type: &str) -> GgufWriter {
    GgufWriter::new()
        .kv("general.architecture", arch)
        .kv("general.type", general_type)
        .kv("adapter.type", adapter_type)
}

/// `w` with the `.lora_a` / `.lora_b` tensors of `tensors`, stored as `ty`.
pub fn add_lora_tensors(mut w: GgufWriter, tensors: &[LoraTensor], ty: GgmlType) -> GgufWriter {
    for t in tensors {
        let rank = t.a.len() / t.d_in;
        w = w.tensor(
            &format!("{}.lora_a", t.base),
            &[t.d_in as u64, rank as u64],
            ty,
            encode(&t.a, t.d_in, ty),
        );
        w = w.tensor(
            &format!("{}.lora_b", t.base),
            &[rank as u64, t.d_out as u64],
            ty,
            encode(&t.b, rank, ty),
        );
    }
    w
}

/// How a PEFT directory is written.
#[derive(Clone, Copy, Debug)]
pub struct PeftOptions {
    /// Llama permutes q/k rows between HF and GGUF; qwen2 and gemma3 do not.
    pub llama_rope: Option<(usize, usize)>,
    pub use_rslora: bool,
    pub fan_in_fan_out: bool,
}

/// HF's module of a GGUF stem.
fn hf_module(stem: &str) -> &'static str {
    match stem {
        "attn_q" => "self_attn.q_proj",
        "attn_k" => "self_attn.k_proj",
        "attn_v" => "self_attn.v_proj",
        "attn_output" => "self_attn.o_proj",
        "ffn_gate" => "mlp.gate_proj",
        "ffn_up" => "mlp.up_proj",
        _ => "mlp.down_proj",
    }
}

/// Writes `tensors` into `dir` as a PEFT adapter of rank `rank` whose scale equals the GGUF
/// adapter's `alpha / rank`.
pub fn write_peft(
    dir: &Path,
    rank: usize,
    gguf_alpha: f32,
    tensors: &[LoraTensor],
    opts: PeftOptions,
) -> io::Result<()> {
    let mut st = Vec::new();
    let mut modules = Vec::new();
    for t in tensors {
        let rest = t.base.strip_prefix("blk.").unwrap_or(&t.base);
        let (layer, rest) = rest.split_once('.').unwrap_or(("0", rest));
        let stem = rest.strip_suffix(".weight").unwrap_or(rest);
        let module = hf_module(stem);
        let short = module.rsplit('.').next().unwrap_or(module);
        if !modules.contains(&short) {
            modules.push(short);
        }
        let mut b = t.b.clone();
        if let Some((heads, kv_heads)) = opts.llama_rope {
            match stem {
                "attn_q" => b = to_hf_rope_order(&b, heads, rank),
                "attn_k" => b = to_hf_rope_order(&b, kv_heads, rank),
                _ => {}
            }
        }
        let prefix = format!("base_model.model.model.layers.{layer}.{module}");
        let (a_shape, a, b_shape) = if opts.fan_in_fan_out {
            (
                vec![t.d_in, rank],
                transpose(&t.a, rank, t.d_in),
                vec![rank, t.d_out],
            )
        } else {
            (vec![rank, t.d_in], t.a.clone(), vec![t.d_out, rank])
        };
        if opts.fan_in_fan_out {
            b = transpose(&b, t.d_out, rank);
        }
        st.push((format!("{prefix}.lora_A.weight"), a_shape, a));
        st.push((format!("{prefix}.lora_B.weight"), b_shape, b));
    }
    write_safetensors(&dir.join("adapter_model.safetensors"), &st)?;
    let alpha = if opts.use_rslora {
        gguf_alpha / (rank as f32).sqrt()
    } else {
        gguf_alpha
    };
    let config = json!({
        "peft_type": "LORA",
        "r": rank,
        "lora_alpha": alpha,
        "target_modules": modules,
        "use_rslora": opts.use_rslora,
        "fan_in_fan_out": opts.fan_in_fan_out,
        "bias": "none",
        "modules_to_save": null,
        "base_model_name_or_path": "tiny",
    });
    std::fs::write(dir.join("adapter_config.json"), config.to_string())
}

fn transpose(v: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0f32; v.len()];
    for r in 0..rows {
        for c in 0..cols {
            out[c * rows + r] = v[r * cols + c];
        }
    }
    out
}
