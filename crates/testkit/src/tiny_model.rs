//! Tiny random-weight GGUF models (llama and gemma3 architectures) for tests that need no real
//! model file. Shapes are small but every tensor role uses a quant type the real files use
//! (Q8_0, Q4_1, Q5_0, Q4_K, Q6_K, F32), and the metadata includes a tokenizer vocabulary.

use pagoda_kernels::quant::{GgmlType, dequantize_row, quantize_row};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::gguf_writer::{GgufWriter, Value};

/// Which architecture's tensors and metadata to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TinyArch {
    Llama,
    Gemma3,
    /// Qwen3: the llama graph with per-head q/k norms.
    Qwen3,
    /// Qwen2: the llama graph with q/k/v biases (and NEOX RoPE).
    Qwen2,
}

/// The shape of a tiny model. K-quant tensors need rows of a multiple of 256, so `d_model` and
/// `ffn_dim` are multiples of 256.
#[derive(Clone, Debug)]
pub struct TinyModel {
    pub arch: TinyArch,
    pub vocab_size: usize,
    pub d_model: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub ffn_dim: usize,
    /// The sliding window: Gemma 3's local layers; on llama and qwen3, every layer when > 0.
    pub sliding_window: u32,
    pub context_length: usize,
    pub seed: u64,
    /// When set, every layer matrix is stored as this type instead of the per-role mix (the
    /// token embedding stays Q8_0), so one file exercises one weight type end to end.
    pub matrix_type: Option<GgmlType>,
    /// Store every layer matrix as F32 holding the values after a round trip through its type:
    /// the same weights as the quantized file, for checking a type's kernels against f32 math.
    pub dequantized: bool,
}

impl TinyModel {
    /// A 2-layer llama with grouped-query attention (4 heads, 2 KV heads).
    pub fn llama() -> Self {
        Self {
            arch: TinyArch::Llama,
            vocab_size: 256,
            d_model: 256,
            n_layers: 2,
            n_heads: 4,
            n_kv_heads: 2,
            head_dim: 64,
            ffn_dim: 512,
            sliding_window: 0,
            context_length: 1024,
            seed: 1,
            matrix_type: None,
            dequantized: false,
        }
    }

    /// A 6-layer gemma3 (5 sliding-window layers of window 8, then one global layer), with
    /// head_dim 128 != d_model / n_heads like the real model.
    pub fn gemma3() -> Self {
        Self {
            arch: TinyArch::Gemma3,
            vocab_size: 256,
            d_model: 256,
            n_layers: 6,
            n_heads: 4,
            n_kv_heads: 1,
            head_dim: 128,
            ffn_dim: 512,
            sliding_window: 8,
            context_length: 1024,
            seed: 2,
            matrix_type: None,
            dequantized: false,
        }
    }

    /// A 2-layer Mistral: the llama graph with a declared sliding window (8) on every layer, as
    /// Mistral 7B v0.1 has (4,096).
    pub fn mistral() -> Self {
        Self {
            sliding_window: 8,
            seed: 4,
            ..Self::llama()
        }
    }

    /// A 2-layer qwen3 (per-head q/k RMSNorm, no biases) with head_dim 128 != d_model /
    /// n_heads, as Qwen3's real models have.
    pub fn qwen3() -> Self {
        Self {
            arch: TinyArch::Qwen3,
            vocab_size: 256,
            d_model: 256,
            n_layers: 2,
            n_heads: 4,
            n_kv_heads: 2,
            head_dim: 128,
            ffn_dim: 512,
            sliding_window: 0,
            context_length: 1024,
            seed: 3,
            matrix_type: None,
            dequantized: false,
        }
    }

    /// A 2-layer qwen2 (q/k/v biases) with 8 heads of 64 over 2 KV heads.
    pub fn qwen2() -> Self {
        Self {
            arch: TinyArch::Qwen2,
            d_model: 512,
            n_heads: 8,
            seed: 5,
            ..Self::llama()
        }
    }

    /// The type of a layer matrix whose role uses `role_type`.
    fn layer_type(&self, role_type: GgmlType) -> GgmlType {
        self.matrix_type.unwrap_or(role_type)
    }

    /// A layer matrix of type `ty`, or its F32 round trip when `dequantized`.
    #[allow(clippy::too_many_arguments)]
    fn layer_matrix(
        &self,
        w: GgufWriter,
        rng: &mut ChaCha8Rng,
        name: &str,
        rows: usize,
        cols: usize,
        ty: GgmlType,
        gain: f32,
    ) -> GgufWriter {
        if !self.dequantized {
            return matrix(w, rng, name, rows, cols, ty, gain);
        }
        let (_, data) = matrix_data(rng, rows, cols, ty, gain);
        let mut row = vec![0.0f32; cols];
        let mut f32_bytes = Vec::with_capacity(rows * cols * 4);
        for src in data.chunks_exact(data.len() / rows) {
            dequantize_row(ty, src, &mut row);
            f32_bytes.extend(row.iter().flat_map(|v| v.to_le_bytes()));
        }
        w.tensor(name, &[cols as u64, rows as u64], GgmlType::F32, f32_bytes)
    }

    fn arch_name(&self) -> &'static str {
        match self.arch {
            TinyArch::Llama => "llama",
            TinyArch::Gemma3 => "gemma3",
            TinyArch::Qwen3 => "qwen3",
            TinyArch::Qwen2 => "qwen2",
        }
    }

    /// The GGUF file's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.writer().to_bytes()
    }

    /// A writer holding the whole model, to add or override entries before writing.
    pub fn writer(&self) -> GgufWriter {
        let a = self.arch_name();
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        let mut w = GgufWriter::new()
            .kv("general.architecture", a)
            .kv("general.name", format!("tiny-{a}").as_str())
            .kv(&format!("{a}.context_length"), self.context_length as u32)
            .kv(&format!("{a}.embedding_length"), self.d_model as u32)
            .kv(&format!("{a}.block_count"), self.n_layers as u32)
            .kv(&format!("{a}.feed_forward_length"), self.ffn_dim as u32)
            .kv(&format!("{a}.attention.head_count"), self.n_heads as u32)
            .kv(
                &format!("{a}.attention.head_count_kv"),
                self.n_kv_heads as u32,
            );
        w = match self.arch {
            TinyArch::Llama => w
                .kv(&format!("{a}.attention.layer_norm_rms_epsilon"), 1e-5f32)
                .kv(&format!("{a}.rope.freq_base"), 10_000.0f32)
                .kv(&format!("{a}.rope.dimension_count"), self.head_dim as u32),
            TinyArch::Qwen2 => w
                .kv(&format!("{a}.attention.layer_norm_rms_epsilon"), 1e-6f32)
                .kv(&format!("{a}.rope.freq_base"), 1_000_000.0f32),
            TinyArch::Qwen3 => w
                .kv(&format!("{a}.attention.layer_norm_rms_epsilon"), 1e-6f32)
                .kv(&format!("{a}.rope.freq_base"), 1_000_000.0f32)
                .kv(&format!("{a}.attention.key_length"), self.head_dim as u32)
                .kv(&format!("{a}.attention.value_length"), self.head_dim as u32),
            TinyArch::Gemma3 => w
                .kv(&format!("{a}.attention.layer_norm_rms_epsilon"), 1e-6f32)
                .kv(&format!("{a}.rope.freq_base"), 1_000_000.0f32)
                .kv(&format!("{a}.attention.key_length"), self.head_dim as u32)
                .kv(&format!("{a}.attention.value_length"), self.head_dim as u32)
                .kv(
                    &format!("{a}.attention.sliding_window"),
                    self.sliding_window,
                ),
        };
        if self.arch != TinyArch::Gemma3 && self.sliding_window > 0 {
            w = w.kv(
                &format!("{a}.attention.sliding_window"),
                self.sliding_window,
            );
        }
        w = self.tokenizer(w);

        let (d, f, hd) = (self.d_model, self.ffn_dim, self.head_dim);
        let (qd, kvd) = (self.n_heads * hd, self.n_kv_heads * hd);
        w = matrix(
            w,
            &mut rng,
            "token_embd.weight",
            self.vocab_size,
            d,
            GgmlType::Q8_0,
            1.0,
        );
        w = norm(w, &mut rng, "output_norm.weight", d);
        for il in 0..self.n_layers {
            let p = format!("blk.{il}");
            w = norm(w, &mut rng, &format!("{p}.attn_norm.weight"), d);
            w = self.layer_matrix(
                w,
                &mut rng,
                &format!("{p}.attn_q.weight"),
                qd,
                d,
                self.layer_type(GgmlType::Q4_1),
                1.0,
            );
            w = self.layer_matrix(
                w,
                &mut rng,
                &format!("{p}.attn_k.weight"),
                kvd,
                d,
                self.layer_type(GgmlType::Q5_0),
                1.0,
            );
            w = self.layer_matrix(
                w,
                &mut rng,
                &format!("{p}.attn_v.weight"),
                kvd,
                d,
                self.layer_type(GgmlType::Q8_0),
                1.0,
            );
            w = self.layer_matrix(
                w,
                &mut rng,
                &format!("{p}.attn_output.weight"),
                d,
                qd,
                self.layer_type(GgmlType::Q4_K),
                1.0,
            );
            w = norm(w, &mut rng, &format!("{p}.ffn_norm.weight"), d);
            w = self.layer_matrix(
                w,
                &mut rng,
                &format!("{p}.ffn_gate.weight"),
                f,
                d,
                self.layer_type(GgmlType::Q4_K),
                1.0,
            );
            w = self.layer_matrix(
                w,
                &mut rng,
                &format!("{p}.ffn_up.weight"),
                f,
                d,
                self.layer_type(GgmlType::Q6_K),
                1.0,
            );
            w = self.layer_matrix(
                w,
                &mut rng,
                &format!("{p}.ffn_down.weight"),
                d,
                f,
                self.layer_type(GgmlType::Q6_K),
                1.0,
            );
            if self.arch == TinyArch::Qwen2 {
                w = bias(w, &mut rng, &format!("{p}.attn_q.bias"), qd);
                w = bias(w, &mut rng, &format!("{p}.attn_k.bias"), kvd);
                w = bias(w, &mut rng, &format!("{p}.attn_v.bias"), kvd);
            }
            if self.arch == TinyArch::Qwen3 {
                w = norm(w, &mut rng, &format!("{p}.attn_q_norm.weight"), hd);
                w = norm(w, &mut rng, &format!("{p}.attn_k_norm.weight"), hd);
            }
            if self.arch == TinyArch::Gemma3 {
                w = norm(w, &mut rng, &format!("{p}.attn_q_norm.weight"), hd);
                w = norm(w, &mut rng, &format!("{p}.attn_k_norm.weight"), hd);
                w = norm(w, &mut rng, &format!("{p}.post_attention_norm.weight"), d);
                w = norm(w, &mut rng, &format!("{p}.post_ffw_norm.weight"), d);
            }
        }
        w
    }

    /// Vocabulary metadata: ids 0..3 are control tokens (`<pad>`/`<eos>`/`<bos>`/`<unk>`
    /// order as Gemma, or `<|endoftext|>`, `<|im_start|>`, `<|im_end|>` as SmolLM2), the rest
    /// single characters.
    fn tokenizer(&self, w: GgufWriter) -> GgufWriter {
        let specials: &[&str] = match self.arch {
            TinyArch::Llama | TinyArch::Qwen3 | TinyArch::Qwen2 => {
                &["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<unk>"]
            }
            TinyArch::Gemma3 => &["<pad>", "<eos>", "<bos>", "<unk>"],
        };
        let tokens: Vec<String> = (0..self.vocab_size)
            .map(|i| match specials.get(i) {
                Some(s) => s.to_string(),
                None => {
                    char::from_u32(0x100 + i as u32).map_or_else(|| format!("t{i}"), String::from)
                }
            })
            .collect();
        let types = (0..self.vocab_size).map(|i| if i < specials.len() { 3 } else { 1 });
        let w = w
            .kv("tokenizer.ggml.tokens", Value::str_array(&tokens))
            .kv("tokenizer.ggml.token_type", Value::i32_array(types));
        match self.arch {
            TinyArch::Llama | TinyArch::Qwen3 | TinyArch::Qwen2 => w
                .kv("tokenizer.ggml.model", "gpt2")
                .kv(
                    "tokenizer.ggml.merges",
                    Value::str_array(Vec::<String>::new()),
                )
                .kv("tokenizer.ggml.bos_token_id", 1u32)
                .kv("tokenizer.ggml.eos_token_id", 2u32)
                .kv("tokenizer.ggml.add_bos_token", false),
            TinyArch::Gemma3 => w
                .kv("tokenizer.ggml.model", "llama")
                .kv(
                    "tokenizer.ggml.scores",
                    Value::f32_array((0..self.vocab_size).map(|i| -(i as f32))),
                )
                .kv("tokenizer.ggml.bos_token_id", 2u32)
                .kv("tokenizer.ggml.eos_token_id", 1u32)
                .kv("tokenizer.ggml.add_bos_token", true),
        }
    }
}

/// A `rows x cols` matrix (GGUF dims `[cols, rows]`) of uniform values scaled by
/// `gain / sqrt(cols)`, so activations keep their size through the layers.
fn matrix(
    w: GgufWriter,
    rng: &mut ChaCha8Rng,
    name: &str,
    rows: usize,
    cols: usize,
    ty: GgmlType,
    gain: f32,
) -> GgufWriter {
    let (dims, data) = matrix_data(rng, rows, cols, ty, gain);
    w.tensor(name, &dims, ty, data)
}

/// The GGUF dims and `ty` bytes of a [`matrix`].
fn matrix_data(
    rng: &mut ChaCha8Rng,
    rows: usize,
    cols: usize,
    ty: GgmlType,
    gain: f32,
) -> ([u64; 2], Vec<u8>) {
    let scale = gain * (3.0 / cols as f32).sqrt();
    let row_bytes = ty
        .row_bytes(cols)
        .expect("tiny model rows are whole blocks");
    let mut data = vec![0u8; rows * row_bytes];
    let mut row = vec![0.0f32; cols];
    for dst in data.chunks_exact_mut(row_bytes) {
        for v in row.iter_mut() {
            *v = (rng.random::<f32>() * 2.0 - 1.0) * scale;
        }
        quantize_row(ty, &row, dst);
    }
    ([cols as u64, rows as u64], data)
}

/// An F32 bias of small values around 0.
fn bias(w: GgufWriter, rng: &mut ChaCha8Rng, name: &str, len: usize) -> GgufWriter {
    let data: Vec<u8> = (0..len)
        .flat_map(|_| ((rng.random::<f32>() - 0.5) * 0.2).to_le_bytes())
        .collect();
    w.tensor(name, &[len as u64], GgmlType::F32, data)
}

/// An F32 norm weight near 1.
fn norm(w: GgufWriter, rng: &mut ChaCha8Rng, name: &str, len: usize) -> GgufWriter {
    let data: Vec<u8> = (0..len)
        .flat_map(|_| (1.0 + (rng.random::<f32>() - 0.5) * 0.2).to_le_bytes())
        .collect();
    w.tensor(name, &[len as u64], GgmlType::F32, data)
}
