//! `ModelConfig`: the hyper-parameters of one model, read from GGUF metadata plus the
//! architecture facts llama.cpp hard-codes (they are not in the file; each one cites its source).

use pagoda_gguf::GgufFile;
use pagoda_kernels::ops::RopeStyle;

use crate::ModelError;

/// The transformer families pagoda implements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Architecture {
    /// Llama (SmolLM2 and friends): pre-norm, SwiGLU, RoPE NORM.
    Llama,
    /// Qwen2: the llama graph with q/k/v biases and RoPE NEOX.
    Qwen2,
    /// Qwen3: the llama graph with per-head RMSNorm on q and k (no biases) and RoPE NEOX.
    Qwen3,
    /// Gemma 3: sandwich norms, q/k norms, GeGLU, sliding-window layers.
    Gemma3,
}

impl Architecture {
    /// The architecture named by `general.architecture`.
    pub fn from_name(name: &str) -> Result<Self, ModelError> {
        match name {
            "llama" => Ok(Self::Llama),
            "qwen2" => Ok(Self::Qwen2),
            "qwen3" => Ok(Self::Qwen3),
            // EmbeddingGemma (llama.cpp's name): Gemma 3's layers, read as an encoder
            // (`attention.causal` false, a symmetric window).
            "gemma3" | "gemma-embedding" => Ok(Self::Gemma3),
            other => Err(ModelError::UnsupportedArchitecture(other.to_string())),
        }
    }

    /// The GGUF key prefix (`llama.embedding_length`...).
    pub fn name(self) -> &'static str {
        match self {
            Self::Llama => "llama",
            Self::Qwen2 => "qwen2",
            Self::Qwen3 => "qwen3",
            Self::Gemma3 => "gemma3",
        }
    }
}

/// Element type of the KV cache arenas.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KvCacheDtype {
    /// Twice the bytes of f16 and no closer to llama.cpp's own outputs (docs/correctness.md).
    F32,
    /// The default, as in llama.cpp (`--cache-type-k f16`): half the KV memory and half the bytes
    /// attention reads (a batch-32 decode step is ~18% faster at context ~128). All three
    /// models stay within their golden bounds with it.
    #[default]
    F16,
    /// One byte per value plus one f32 scale per (token, kv head): ~1.9x the tokens of f16 in
    /// the same memory (docs/benchmarks.md, "KV cache dtype", for its fidelity).
    Int8,
}

impl KvCacheDtype {
    /// Bytes per stored value.
    pub fn bytes(self) -> usize {
        match self {
            Self::F32 => 4,
            Self::F16 => 2,
            Self::Int8 => 1,
        }
    }

    /// Bytes of one (token, kv head) row of `head_dim` values, its scale included.
    pub fn row_bytes(self, head_dim: usize) -> usize {
        let scale = match self {
            Self::Int8 => std::mem::size_of::<f32>(),
            Self::F32 | Self::F16 => 0,
        };
        head_dim * self.bytes() + scale
    }

    /// The flag's spelling.
    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::F16 => "f16",
            Self::Int8 => "int8",
        }
    }
}

impl std::str::FromStr for KvCacheDtype {
    type Err = ModelError;

    fn from_str(s: &str) -> Result<Self, ModelError> {
        match s {
            "f32" => Ok(Self::F32),
            "f16" => Ok(Self::F16),
            "int8" => Ok(Self::Int8),
            other => Err(ModelError::InvalidRequest(format!(
                "KV cache dtype {other:?} is not f32, f16 or int8"
            ))),
        }
    }
}

/// Hyper-parameters of a loaded model.
#[derive(Clone, Debug)]
pub struct ModelConfig {
    pub architecture: Architecture,
    pub vocab_size: usize,
    /// Width of the residual stream.
    pub d_model: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// Leading dimensions of each head that RoPE rotates.
    pub n_rot: usize,
    pub ffn_dim: usize,
    pub rms_eps: f32,
    /// RoPE base of full-attention layers.
    pub rope_base: f32,
    /// RoPE base of sliding-window layers (Gemma 3).
    pub rope_base_swa: f32,
    pub rope_style: RopeStyle,
    /// Window of the sliding-window layers; `None` when every layer is global.
    pub sliding_window: Option<u32>,
    /// Every `swa_pattern`-th layer (`il % p == p - 1`) is global; the rest slide. 0 with a
    /// window: every layer slides (Mistral).
    pub swa_pattern: usize,
    /// Multiplier of q·k.
    pub attn_scale: f32,
    /// Multiplier of the input embedding (Gemma: sqrt(d_model)).
    pub embed_scale: Option<f32>,
    pub context_length: usize,
    pub bos_token_id: Option<u32>,
    pub eos_token_id: Option<u32>,
    /// Token ids that end generation: eos plus end-of-turn tokens found by their text.
    pub eog_token_ids: Vec<u32>,
    /// What the KV cache stores (not in the file: a run-time choice, f16 by default).
    pub kv_cache_dtype: KvCacheDtype,
    /// Whether a token attends only to earlier ones (`{arch}.attention.causal`, default true);
    /// false for encoders, which [`crate::Encoder`] runs and `Model` refuses.
    pub causal: bool,
}

impl ModelConfig {
    /// Reads the configuration from a GGUF file's metadata.
    pub fn from_gguf(file: &GgufFile) -> Result<Self, ModelError> {
        let arch_name = require_str(file, "general.architecture")?;
        let architecture = Architecture::from_name(&arch_name)?;
        // Keys are under the file's own architecture name (`gemma-embedding.*` for Gemma 3's
        // layers as an encoder).
        let a = arch_name.as_str();
        let key = |k: &str| format!("{a}.{k}");
        let causal = file.get_bool(&key("attention.causal"))?.unwrap_or(true);

        let d_model = require_usize(file, &key("embedding_length"))?;
        let n_layers = require_usize(file, &key("block_count"))?;
        let ffn_dim = require_usize(file, &key("feed_forward_length"))?;
        let n_heads = require_usize(file, &key("attention.head_count"))?;
        let n_kv_heads = opt_usize(file, &key("attention.head_count_kv"))?.unwrap_or(n_heads);
        let context_length = require_usize(file, &key("context_length"))?;
        if n_heads == 0 || n_kv_heads == 0 || n_heads % n_kv_heads != 0 {
            return Err(bad(
                &key("attention.head_count_kv"),
                format!("{n_kv_heads} kv heads do not divide {n_heads} heads"),
            ));
        }
        // Gemma 3's head_dim (256) is not d_model / n_heads (160): llama.cpp reads
        // `attention.key_length` when present (llama-model.cpp, load_hparams).
        let head_dim = match opt_usize(file, &key("attention.key_length"))? {
            Some(h) => h,
            None if d_model % n_heads == 0 => d_model / n_heads,
            None => {
                return Err(bad(
                    &key("attention.head_count"),
                    format!("{n_heads} heads do not divide embedding_length {d_model}"),
                ));
            }
        };
        if let Some(v) = opt_usize(file, &key("attention.value_length"))?
            && v != head_dim
        {
            return Err(bad(
                &key("attention.value_length"),
                format!("{v} != key_length {head_dim}"),
            ));
        }
        let n_rot = opt_usize(file, &key("rope.dimension_count"))?.unwrap_or(head_dim);
        if n_rot > head_dim || n_rot % 2 != 0 {
            return Err(bad(
                &key("rope.dimension_count"),
                format!("{n_rot} with head_dim {head_dim}"),
            ));
        }
        let rms_eps = file
            .get_f32(&key("attention.layer_norm_rms_epsilon"))?
            .ok_or_else(|| ModelError::MissingKey(key("attention.layer_norm_rms_epsilon")))?;
        let rope_base = file.get_f32(&key("rope.freq_base"))?.unwrap_or(10_000.0);

        let tokens_key = "tokenizer.ggml.tokens";
        // An encoder converted from a checkpoint tokenizes with its tokenizer.json, so its file
        // may carry only the vocabulary's size.
        let tokens = match file.get_str_array(tokens_key)? {
            Some(t) => t,
            None if !causal => &[][..],
            None => return Err(ModelError::MissingKey(tokens_key.to_string())),
        };
        let vocab_size = match opt_usize(file, &key("vocab_size"))? {
            Some(v) if v != tokens.len() && !tokens.is_empty() => {
                return Err(bad(
                    &key("vocab_size"),
                    format!("{v} != {} tokens", tokens.len()),
                ));
            }
            Some(v) => v,
            None if tokens.is_empty() => {
                return Err(ModelError::MissingKey(key("vocab_size")));
            }
            None => tokens.len(),
        };
        let token_id = |k: &str| -> Result<Option<u32>, ModelError> {
            match file.get_u32(k)? {
                Some(id) if id as usize >= vocab_size => {
                    Err(bad(k, format!("{id} outside vocabulary of {vocab_size}")))
                }
                other => Ok(other),
            }
        };
        let bos_token_id = token_id("tokenizer.ggml.bos_token_id")?;
        let eos_token_id = token_id("tokenizer.ggml.eos_token_id")?;
        let eot_token_id = token_id("tokenizer.ggml.eot_token_id")?;
        let eom_token_id = token_id("tokenizer.ggml.eom_token_id")?;
        let eog_token_ids =
            pagoda_gguf::end_of_generation_ids(tokens, &[eos_token_id, eot_token_id, eom_token_id]);

        let mut config = Self {
            architecture,
            vocab_size,
            d_model,
            n_layers,
            n_heads,
            n_kv_heads,
            head_dim,
            n_rot,
            ffn_dim,
            rms_eps,
            rope_base,
            rope_base_swa: rope_base,
            // llama.cpp's rope-type table (llama-model.cpp, llama_model_rope_type): LLAMA is NORM
            // (convert_hf_to_gguf permutes Q/K for it), QWEN2 and GEMMA3 are NEOX.
            rope_style: match architecture {
                Architecture::Llama => RopeStyle::Norm,
                // llama_model_rope_type: QWEN2, QWEN3 and GEMMA3 are LLAMA_ROPE_TYPE_NEOX.
                Architecture::Qwen2 | Architecture::Qwen3 | Architecture::Gemma3 => RopeStyle::Neox,
            },
            sliding_window: None,
            swa_pattern: 0,
            attn_scale: 1.0 / (head_dim as f32).sqrt(),
            embed_scale: None,
            context_length,
            bos_token_id,
            eos_token_id,
            eog_token_ids,
            kv_cache_dtype: KvCacheDtype::default(),
            causal,
        };
        if architecture != Architecture::Gemma3 {
            // Mistral's GGUF files are llama ones; where one declares a window (Mistral 7B
            // v0.1: 4,096), every layer attends within it, as transformers' MistralAttention
            // does. Absent or 0: full attention.
            let k = key("attention.sliding_window");
            config.sliding_window = match file.get_u64(&k)? {
                None | Some(0) => None,
                Some(w) => {
                    Some(u32::try_from(w).map_err(|_| bad(&k, format!("{w} is out of range")))?)
                }
            };
        } else {
            // llama.cpp load_hparams for LLM_ARCH_GEMMA3: set_swa_pattern(6) (layers with
            // il % 6 == 5 are global), rope_freq_base_train_swa = 10000, and
            // f_attention_scale = 1/sqrt(n_embd_head_k) (already the default above).
            config.swa_pattern = 6;
            config.rope_base_swa = 10_000.0;
            config.sliding_window = Some(
                opt_usize(file, &key("attention.sliding_window"))?
                    .ok_or_else(|| ModelError::MissingKey(key("attention.sliding_window")))?
                    as u32,
            );
            // llm_build_gemma3: inpL = ggml_scale(inpL, sqrtf(n_embd)).
            config.embed_scale = Some((d_model as f32).sqrt());
        }
        Ok(config)
    }

    /// True when layer `il` attends within the sliding window rather than globally.
    pub fn is_swa_layer(&self, il: usize) -> bool {
        match (self.sliding_window, self.swa_pattern) {
            (None, _) => false,
            (Some(_), 0) => true,
            (Some(_), p) => il % p != p - 1,
        }
    }

    /// The query projection width (n_heads x head_dim).
    pub fn q_dim(&self) -> usize {
        self.n_heads * self.head_dim
    }

    /// The key/value projection width (n_kv_heads x head_dim).
    pub fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }

    /// KV cache bytes one token holds over all layers (K and V, scales included).
    pub fn kv_bytes_per_token(&self) -> usize {
        2 * self.n_layers * self.n_kv_heads * self.kv_cache_dtype.row_bytes(self.head_dim)
    }
}

fn bad(key: &str, reason: String) -> ModelError {
    ModelError::BadKey {
        key: key.to_string(),
        reason,
    }
}

fn require_str(file: &GgufFile, key: &str) -> Result<String, ModelError> {
    file.get_str(key)?
        .map(|s| s.to_string())
        .ok_or_else(|| ModelError::MissingKey(key.to_string()))
}

fn opt_usize(file: &GgufFile, key: &str) -> Result<Option<usize>, ModelError> {
    let Some(v) = file.get_u64(key)? else {
        return Ok(None);
    };
    if v == 0 || v > (1 << 32) {
        return Err(bad(key, format!("{v} is out of range")));
    }
    Ok(Some(v as usize))
}

fn require_usize(file: &GgufFile, key: &str) -> Result<usize, ModelError> {
    opt_usize(file, key)?.ok_or_else(|| ModelError::MissingKey(key.to_string()))
}
