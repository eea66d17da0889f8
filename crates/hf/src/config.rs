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
    /// A BERT encoder with its classification head (`BertForSequenceClassification`: the
    /// pooler's dense + tanh on [CLS], then the classifier), a cross-encoder scoring text pairs
    /// (sentence-transformers' CrossEncoder, e.g. cross-encoder/ms-marco-MiniLM-L-6-v2).
    BertCrossEncoder,
    /// Gemma 3's layers with bidirectional attention (EmbeddingGemma's `Gemma3TextModel`),
    /// llama.cpp's `gemma-embedding`.
    GemmaEmbedding,
}

impl Arch {
    /// Whether this is an encoder whose output is an embedding, not next-token logits.
    pub fn is_encoder(self) -> bool {
        matches!(
            self,
            Self::Bert | Self::BertCrossEncoder | Self::GemmaEmbedding
        )
    }

    /// Whether the layers are BERT's (names, LayerNorm epsilon).
    pub fn is_bert(self) -> bool {
        matches!(self, Self::Bert | Self::BertCrossEncoder)
    }

    /// Whether the layers are Gemma 3's (names, `1 + w` norms, defaults).
    pub fn is_gemma(self) -> bool {
        matches!(self, Self::Gemma3 | Self::GemmaEmbedding)
    }

    pub fn gguf_name(self) -> &'static str {
        match self {
            Self::Llama => "llama",
            Self::Qwen2 => "qwen2",
            Self::Qwen3 => "qwen3",
            Self::Gemma3 => "gemma3",
            Self::Bert | Self::BertCrossEncoder => "bert",
            Self::GemmaEmbedding => "gemma-embedding",
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
    /// Qwen2/Qwen3 declare a `sliding_window` they do not use unless this is true.
    pub use_sliding_window: Option<bool>,
    pub bos_token_id: Option<serde_json::Value>,
    pub eos_token_id: Option<serde_json::Value>,
    pub text_config: Option<Box<serde_json::Value>>,
    /// Gemma 3: every layer attends both ways (EmbeddingGemma).
    pub use_bidirectional_attention: Option<bool>,
    /// Gemma 3: q·k is scaled by `query_pre_attn_scalar^-0.5`.
    pub query_pre_attn_scalar: Option<f64>,
    /// Gemma 3: `sliding_attention` or `full_attention` per layer.
    pub layer_types: Option<Vec<String>>,
    /// Gemma 3: the RoPE base of the sliding layers.
    pub rope_local_base_freq: Option<f32>,
    pub hidden_activation: Option<String>,
    pub attn_logit_softcapping: Option<f64>,
}

fn default_context() -> usize {
    2048
}

impl HfConfig {
    pub fn read(path: &Path) -> Result<Self, HfError> {
        let text = crate::read_text::read_text(path)?;
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
            // Mistral is the llama graph (GGUF files store it as llama), plus a sliding window
            // where its config declares one.
            "LlamaForCausalLM" | "MistralForCausalLM" | "llama" | "mistral" => Arch::Llama,
            "Qwen2ForCausalLM" | "qwen2" => Arch::Qwen2,
            "Qwen3ForCausalLM" | "qwen3" => Arch::Qwen3,
            "Gemma3ForCausalLM" | "Gemma3ForConditionalGeneration" | "gemma3" | "gemma3_text" => {
                Arch::Gemma3
            }
            "BertModel" | "bert" => Arch::Bert,
            "BertForSequenceClassification" => Arch::BertCrossEncoder,
            // The bare text model has no LM head: pagoda runs it only as EmbeddingGemma's
            // encoder.
            "Gemma3TextModel" if self.use_bidirectional_attention == Some(true) => {
                Arch::GemmaEmbedding
            }
            "Gemma3TextModel" => {
                return Err(HfError::UnsupportedArchitecture(
                    "Gemma3TextModel without use_bidirectional_attention (a decoder without its LM head)"
                        .to_owned(),
                ));
            }
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
        self.tie_word_embeddings.unwrap_or(arch.is_gemma())
    }

    /// The window the model's attention really uses: Gemma 3's (and EmbeddingGemma's) local
    /// layers, every layer of a Mistral that declares one (v0.1; later versions set it to
    /// null); never Qwen's (its `use_sliding_window` is refused by [`HfConfig::check`]).
    pub fn effective_sliding_window(&self, arch: Arch) -> Option<usize> {
        match arch {
            a if a.is_gemma() => self.sliding_window,
            Arch::Llama if self.use_sliding_window != Some(false) => self.sliding_window,
            _ => None,
        }
        .filter(|&w| w > 0)
    }

    /// Refuses what the forward pass would silently get wrong.
    pub fn check(&self) -> Result<(), HfError> {
        if self.use_sliding_window == Some(true)
            && matches!(self.arch(), Ok(Arch::Qwen2 | Arch::Qwen3))
        {
            return Err(HfError::Config(
                "use_sliding_window (Qwen's window on the layers past max_window_layers) is not \
                 supported"
                    .to_owned(),
            ));
        }
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
        if self.arch()?.is_gemma() {
            self.check_gemma()?;
        }
        Ok(())
    }

    /// Gemma 3's keys that pagoda does not read but assumes (llama.cpp hard-codes them): a
    /// checkpoint that sets them otherwise would run wrong, so it is refused.
    fn check_gemma(&self) -> Result<(), HfError> {
        let head_dim = self.head_dim();
        if let Some(q) = self.query_pre_attn_scalar
            && q != head_dim as f64
        {
            return Err(HfError::Config(format!(
                "query_pre_attn_scalar {q} != head_dim {head_dim} (pagoda scales q·k by head_dim^-0.5)"
            )));
        }
        if let Some(b) = self.rope_local_base_freq
            && b != 10_000.0
        {
            return Err(HfError::Config(format!(
                "rope_local_base_freq {b} (pagoda's Gemma 3 sliding layers use 10000)"
            )));
        }
        if let Some(a) = &self.hidden_activation
            && a != "gelu_pytorch_tanh"
        {
            return Err(HfError::Config(format!(
                "hidden_activation {a} (pagoda's Gemma 3 uses gelu_pytorch_tanh)"
            )));
        }
        if self.attn_logit_softcapping.is_some() {
            return Err(HfError::Config(
                "attn_logit_softcapping is not supported".to_owned(),
            ));
        }
        if let Some(types) = &self.layer_types {
            if types.len() != self.num_hidden_layers {
                return Err(HfError::Config(format!(
                    "layer_types has {} entries for {} layers",
                    types.len(),
                    self.num_hidden_layers
                )));
            }
            // llama.cpp's set_swa_pattern(6): every sixth layer is global.
            for (il, t) in types.iter().enumerate() {
                let want = if il % 6 == 5 {
                    "full_attention"
                } else {
                    "sliding_attention"
                };
                if t != want {
                    return Err(HfError::Config(format!(
                        "layer_types[{il}] is {t}: pagoda's Gemma 3 layers slide but every sixth"
                    )));
                }
            }
        }
        if self.sliding_window.is_none() {
            return Err(HfError::Config("Gemma 3 needs sliding_window".to_owned()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn config(extra: &str) -> HfConfig {
        let json = format!(
            r#"{{"hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 128,
                "num_attention_heads": 4, "vocab_size": 100{extra}}}"#
        );
        serde_json::from_str(&json).unwrap()
    }

    #[test]
    fn mistral_window_is_used_where_declared_and_qwens_never() {
        let v01 = config(r#", "architectures": ["MistralForCausalLM"], "sliding_window": 4096"#);
        assert_eq!(v01.arch().unwrap(), Arch::Llama);
        assert_eq!(v01.effective_sliding_window(Arch::Llama), Some(4096));
        let v02 = config(r#", "architectures": ["MistralForCausalLM"], "sliding_window": null"#);
        assert_eq!(v02.effective_sliding_window(Arch::Llama), None);
        let qwen = config(
            r#", "architectures": ["Qwen2ForCausalLM"], "sliding_window": 32768,
               "use_sliding_window": false"#,
        );
        assert_eq!(qwen.effective_sliding_window(Arch::Qwen2), None);
        qwen.check().unwrap();
        let qwen_swa = config(
            r#", "architectures": ["Qwen2ForCausalLM"], "sliding_window": 32768,
               "use_sliding_window": true"#,
        );
        let err = qwen_swa.check().unwrap_err().to_string();
        assert!(err.contains("use_sliding_window"), "{err}");
    }
}
