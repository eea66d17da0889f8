//! `config.json`: the hyper-parameters pagoda needs, with the defaults transformers applies
//! when a key is absent, and the GGUF architecture each `architectures` entry maps to.

use std::path::Path;

use serde::Deserialize;

use crate::HfError;

/// The GGUF architecture of a checkpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    Llama,
    Qwen2,
    Qwen3,
    Gemma3,
    /// BERT encoders (sentence-transformers models such as all-MiniLM-L6-v2).
    Bert,
}

impl Arch {
    /// Whether this is an encoder whose output is an embedding, not next-token logits.
    pub fn is_encoder(self) -> bool {
        self == Self::Bert
    }

    pub fn gguf_name(self) -> &'static str {
        match self {
            Self::Llama => "llama",
            Self::Qwen2 => "qwen2",
            Self::Qwen3 => "qwen3",
            Self::Gemma3 => "gemma3",
            Self::Bert => "bert",
        }
    }
}

/// The parsed `config.json`. Gemma 3 multimodal checkpoints nest the language model's keys
/// under `text_config`; [`HfConfig::read`] reads those.
#[derive(Clone, Debug, Deserialize)]
pub struct HfConfig {
    #[serde(default)]
    pub architectures: Vec<String>,
    #[serde(default)]
    pub model_type: String,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub intermediate_size: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: Option<usize>,
    pub head_dim: Option<usize>,
    pub vocab_size: usize,
    #[serde(default = "default_context")]
    pub max_position_embeddings: usize,
    pub rms_norm_eps: Option<f32>,
    pub layer_norm_eps: Option<f32>,
    pub type_vocab_size: Option<usize>,
    pub rope_theta: Option<f32>,
    pub rope_scaling: Option<serde_json::Value>,
    #[serde(default)]
    pub tie_word_embeddings: Option<bool>,
    pub sliding_window: Option<usize>,
    pub bos_token_id: Option<serde_json::Value>,
    pub eos_token_id: Option<serde_json::Value>,
    pub text_config: Option<Box<serde_json::Value>>,
}

fn default_context() -> usize {
    2048
}

impl HfConfig {
    pub fn read(path: &Path) -> Result<Self, HfError> {
        let text = std::fs::read_to_string(path).map_err(|source| HfError::Io {
            path: path.to_owned(),
            source,
        })?;
        let mut value: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| HfError::Config(e.to_string()))?;
        // Gemma3ForConditionalGeneration: the text model's keys live in text_config.
        if let Some(text) = value.get("text_config").cloned()
            && text.is_object()
            && let (Some(outer), Some(inner)) = (value.as_object_mut(), text.as_object())
        {
            for (k, v) in inner {
                outer.entry(k.clone()).or_insert_with(|| v.clone());
            }
        }
        serde_json::from_value(value).map_err(|e| HfError::Config(e.to_string()))
    }

    /// The architecture, from the first `architectures` entry (else `model_type`).
    pub fn arch(&self) -> Result<Arch, HfError> {
        let name = self
            .architectures
            .first()
            .cloned()
            .unwrap_or_else(|| self.model_type.clone());
        Ok(match name.as_str() {
            "LlamaForCausalLM" | "llama" => Arch::Llama,
            "Qwen2ForCausalLM" | "qwen2" => Arch::Qwen2,
            "Qwen3ForCausalLM" | "qwen3" => Arch::Qwen3,
            "Gemma3ForCausalLM" | "Gemma3ForConditionalGeneration" | "gemma3" | "gemma3_text" => {
                Arch::Gemma3
            }
            "BertModel" | "bert" => Arch::Bert,
            other => return Err(HfError::UnsupportedArchitecture(other.to_owned())),
        })
    }

    pub fn n_kv_heads(&self) -> usize {
        self.num_key_value_heads.unwrap_or(self.num_attention_heads)
    }

    pub fn head_dim(&self) -> usize {
        self.head_dim
            .unwrap_or(self.hidden_size / self.num_attention_heads.max(1))
    }

    /// Whether the LM head is the token embedding (transformers' default is tied for Gemma,
    /// untied for Llama and Qwen; Qwen3's small models set it explicitly).
    pub fn tied(&self, arch: Arch) -> bool {
        self.tie_word_embeddings.unwrap_or(arch == Arch::Gemma3)
    }

    /// Refuses what the forward pass would silently get wrong.
    pub fn check(&self) -> Result<(), HfError> {
        if self.num_attention_heads == 0 || self.n_kv_heads() == 0 {
            return Err(HfError::Config("zero attention heads".to_owned()));
        }
        if let Some(s) = &self.rope_scaling
            && !s.is_null()
        {
            let kind = s
                .get("rope_type")
                .or_else(|| s.get("type"))
                .and_then(|v| v.as_str())
                .unwrap_or("?");
            if kind != "default" {
                return Err(HfError::Config(format!(
                    "rope_scaling of type {kind} is not supported"
                )));
            }
        }
        Ok(())
    }
}
