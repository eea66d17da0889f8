//! The tokenizer-relevant GGUF metadata as plain data (`tokenizer.ggml.*`), so the tokenizer
//! can be built and tested independently of how the file was read.

/// Token types as llama.cpp stores them in `tokenizer.ggml.token_type` (llama.h `llama_token_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TokenType {
    Undefined,
    Normal,
    Unknown,
    Control,
    UserDefined,
    Unused,
    Byte,
}

impl TokenType {
    /// Maps the stored integer; anything unknown is treated as `Undefined` (llama.cpp does the same).
    pub fn from_i32(v: i32) -> Self {
        match v {
            1 => Self::Normal,
            2 => Self::Unknown,
            3 => Self::Control,
            4 => Self::UserDefined,
            5 => Self::Unused,
            6 => Self::Byte,
            _ => Self::Undefined,
        }
    }

    /// Control and unknown tokens are "special": matched in text only with `parse_special`,
    /// dropped by `decode(.., skip_special = true)` (llama-vocab.cpp tokenizer_st_partition).
    pub fn is_special(self) -> bool {
        matches!(self, Self::Control | Self::Unknown)
    }
}

/// Everything the tokenizer needs from a GGUF file's metadata.
#[derive(Clone, Debug, Default)]
pub struct GgufVocab {
    /// `tokenizer.ggml.model`: `gpt2` (byte-level BPE) or `llama` (SentencePiece-style).
    pub model: String,
    /// `tokenizer.ggml.pre`: which pre-tokenizer regexes a `gpt2` model uses.
    pub pre: Option<String>,
    pub tokens: Vec<String>,
    /// `tokenizer.ggml.scores` (empty when absent).
    pub scores: Vec<f32>,
    /// `tokenizer.ggml.token_type` (all `Normal` when absent).
    pub token_types: Vec<TokenType>,
    /// `tokenizer.ggml.merges`, each "left right" (empty when absent).
    pub merges: Vec<String>,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub eot: Option<u32>,
    pub eom: Option<u32>,
    pub unk: Option<u32>,
    pub pad: Option<u32>,
    pub add_bos: bool,
    pub add_eos: bool,
    pub add_space_prefix: bool,
    pub chat_template: Option<String>,
    /// `general.architecture`, used to pick a built-in chat template.
    pub architecture: String,
}
