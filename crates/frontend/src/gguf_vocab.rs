//! Fills [`GgufVocab`] from an open GGUF file, with llama.cpp's defaults for absent keys
//! (llama-vocab.cpp llama_vocab::impl::load).

use pagoda_gguf::{GgufError, GgufFile};

use crate::error::TokenizerError;
use crate::vocab::{GgufVocab, TokenType};

fn gguf(e: GgufError) -> TokenizerError {
    TokenizerError::Gguf(e.to_string())
}

impl GgufVocab {
    /// Reads every `tokenizer.*` key the tokenizer uses.
    pub fn from_gguf(file: &GgufFile) -> Result<Self, TokenizerError> {
        let model = file
            .get_str("tokenizer.ggml.model")
            .map_err(gguf)?
            .ok_or(TokenizerError::MissingKey("tokenizer.ggml.model"))?
            .to_string();
        let tokens = file
            .get_str_array("tokenizer.ggml.tokens")
            .map_err(gguf)?
            .ok_or(TokenizerError::MissingKey("tokenizer.ggml.tokens"))?
            .to_vec();
        let id = |key: &str| file.get_u32(key).map_err(gguf);
        let flag = |key: &str| file.get_bool(key).map_err(gguf);
        // SentencePiece vocabularies default to BOS=1, EOS=2, UNK=0, a BOS and a space prefix;
        // byte-level BPE ones to none of these.
        let spm = model == "llama";
        Ok(Self {
            pre: file
                .get_str("tokenizer.ggml.pre")
                .map_err(gguf)?
                .map(str::to_string),
            scores: file
                .get_f32_array("tokenizer.ggml.scores")
                .map_err(gguf)?
                .map(<[f32]>::to_vec)
                .unwrap_or_default(),
            token_types: file
                .get_i32_array("tokenizer.ggml.token_type")
                .map_err(gguf)?
                .map(|t| t.iter().map(|&v| TokenType::from_i32(v)).collect())
                .unwrap_or_default(),
            merges: file
                .get_str_array("tokenizer.ggml.merges")
                .map_err(gguf)?
                .map(<[String]>::to_vec)
                .unwrap_or_default(),
            bos: id("tokenizer.ggml.bos_token_id")?.or(spm.then_some(1)),
            eos: id("tokenizer.ggml.eos_token_id")?.or(spm.then_some(2)),
            eot: id("tokenizer.ggml.eot_token_id")?,
            eom: id("tokenizer.ggml.eom_token_id")?,
            unk: id("tokenizer.ggml.unknown_token_id")?.or(spm.then_some(0)),
            pad: id("tokenizer.ggml.padding_token_id")?,
            add_bos: flag("tokenizer.ggml.add_bos_token")?.unwrap_or(spm),
            add_eos: flag("tokenizer.ggml.add_eos_token")?.unwrap_or(false),
            add_space_prefix: flag("tokenizer.ggml.add_space_prefix")?.unwrap_or(spm),
            chat_template: file
                .get_str("tokenizer.chat_template")
                .map_err(gguf)?
                .map(str::to_string),
            architecture: file.architecture().map_err(gguf)?.to_string(),
            model,
            tokens,
        })
    }
}
