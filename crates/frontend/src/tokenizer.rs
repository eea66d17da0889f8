//! The public tokenizer: text <-> token ids for a GGUF vocabulary, with llama.cpp's handling
//! of special tokens, BOS/EOS and end-of-generation ids.

use std::collections::HashMap;

use crate::bpe::ByteLevelBpe;
use crate::error::TokenizerError;
use crate::special::{Fragment, SpecialMatcher};
use crate::spm::Spm;
use crate::vocab::{GgufVocab, TokenType};

enum Backend {
    /// `gpt2`: byte-level BPE.
    ByteLevelBpe(Box<ByteLevelBpe>),
    /// `llama`: SentencePiece-style merges by score with byte fallback.
    Spm(Box<Spm>),
}

/// A tokenizer built from GGUF metadata.
pub struct Tokenizer {
    backend: Backend,
    tokens: Vec<String>,
    types: Vec<TokenType>,
    token_to_id: HashMap<String, u32>,
    /// The raw bytes each token stands for (control tokens: their text).
    bytes: Vec<Box<[u8]>>,
    special: SpecialMatcher,
    bos: Option<u32>,
    eos: Option<u32>,
    unk: Option<u32>,
    add_bos: bool,
    add_eos: bool,
    add_space_prefix: bool,
    eog: Vec<u32>,
}

impl Tokenizer {
    /// Builds the tokenizer from the metadata of an open GGUF file.
    pub fn from_gguf(file: &pagoda_gguf::GgufFile) -> Result<Self, TokenizerError> {
        Self::from_vocab(GgufVocab::from_gguf(file)?)
    }

    /// Builds the tokenizer from already-extracted vocabulary metadata.
    pub fn from_vocab(v: GgufVocab) -> Result<Self, TokenizerError> {
        let n = v.tokens.len();
        let types = if v.token_types.is_empty() {
            vec![TokenType::Normal; n]
        } else {
            v.token_types
        };
        if types.len() != n {
            return Err(TokenizerError::LengthMismatch {
                key: "tokenizer.ggml.token_type",
                got: types.len(),
                expected: n,
            });
        }
        for (key, id) in [
            ("tokenizer.ggml.bos_token_id", v.bos),
            ("tokenizer.ggml.eos_token_id", v.eos),
            ("tokenizer.ggml.eot_token_id", v.eot),
            ("tokenizer.ggml.eom_token_id", v.eom),
            ("tokenizer.ggml.unknown_token_id", v.unk),
            ("tokenizer.ggml.padding_token_id", v.pad),
        ] {
            if let Some(id) = id
                && id as usize >= n
            {
                return Err(TokenizerError::IdOutOfRange {
                    key,
                    id,
                    vocab_size: n,
                });
            }
        }
        // Later ids win on duplicate texts, as in llama.cpp's token_to_id map.
        let mut token_to_id = HashMap::with_capacity(n);
        for (id, t) in v.tokens.iter().enumerate() {
            token_to_id.insert(t.clone(), id as u32);
        }

        let special = SpecialMatcher::new(
            v.tokens
                .iter()
                .zip(&types)
                .enumerate()
                .filter(|(_, (_, ty))| {
                    matches!(
                        ty,
                        TokenType::Control | TokenType::UserDefined | TokenType::Unknown
                    )
                })
                .map(|(id, (text, ty))| (id as u32, text.as_str(), ty.is_special()))
                .collect(),
        );

        let (backend, bytes) = match v.model.as_str() {
            "gpt2" => {
                let pre = v.pre.as_deref().unwrap_or("default");
                let bpe = ByteLevelBpe::new(&v.tokens, &v.merges, pre, &token_to_id)?;
                let char_to_byte: HashMap<char, u8> = crate::byte_level::byte_to_char()
                    .iter()
                    .enumerate()
                    .map(|(b, &c)| (c, b as u8))
                    .collect();
                let bytes = v
                    .tokens
                    .iter()
                    .zip(&types)
                    .map(|(t, ty)| match ty {
                        // Added tokens are stored as plain text (convert_hf_to_gguf), not byte-mapped.
                        TokenType::Normal | TokenType::Undefined | TokenType::Byte => {
                            crate::byte_level::decode_piece(t, &char_to_byte).into_boxed_slice()
                        }
                        _ => t.as_bytes().into(),
                    })
                    .collect();
                (Backend::ByteLevelBpe(Box::new(bpe)), bytes)
            }
            "llama" => {
                let scores = if v.scores.is_empty() {
                    vec![0.0; n]
                } else {
                    v.scores
                };
                if scores.len() != n {
                    return Err(TokenizerError::LengthMismatch {
                        key: "tokenizer.ggml.scores",
                        got: scores.len(),
                        expected: n,
                    });
                }
                let bytes = v
                    .tokens
                    .iter()
                    .zip(&types)
                    .map(|(t, ty)| spm_token_bytes(t, *ty))
                    .collect();
                (
                    Backend::Spm(Box::new(Spm::new(scores, &token_to_id))),
                    bytes,
                )
            }
            other => return Err(TokenizerError::UnsupportedModel(other.to_string())),
        };

        let eog = pagoda_gguf::end_of_generation_ids(&v.tokens, &[v.eos, v.eot, v.eom]);

        Ok(Self {
            backend,
            tokens: v.tokens,
            types,
            token_to_id,
            bytes,
            special,
            bos: v.bos,
            eos: v.eos,
            unk: v.unk,
            add_bos: v.add_bos,
            add_eos: v.add_eos,
            add_space_prefix: v.add_space_prefix,
            eog,
        })
    }

    /// Text to ids. `add_special`: BOS/EOS as the metadata asks (`add_bos_token`,
    /// `add_eos_token`). `parse_special`: control-token texts in `text` become their ids
    /// (user-defined tokens always do, as in llama.cpp).
    pub fn encode(&self, text: &str, add_special: bool, parse_special: bool) -> Vec<u32> {
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        if add_special
            && self.add_bos
            && let Some(bos) = self.bos
        {
            out.push(bos);
        }
        // llama.cpp's SPM path prefixes a space to text that starts the input or follows a
        // special token, when add_space_prefix is set (llama_vocab::impl::tokenize).
        let mut prev_special = true;
        for fragment in self.special.partition(text, parse_special) {
            match fragment {
                Fragment::Token(id) => {
                    out.push(id);
                    prev_special = true;
                }
                Fragment::Text(t) => {
                    match &self.backend {
                        Backend::ByteLevelBpe(bpe) => bpe.encode(t, &mut out),
                        Backend::Spm(spm) => {
                            let prefix = self.add_space_prefix && prev_special;
                            spm.encode(t, prefix, &self.token_to_id, self.unk, &mut out)
                        }
                    }
                    prev_special = false;
                }
            }
        }
        if add_special
            && self.add_eos
            && let Some(eos) = self.eos
        {
            out.push(eos);
        }
        out
    }

    /// Ids to text. `skip_special` drops control and unknown tokens. Invalid UTF-8 (a
    /// character cut off by the end of `ids`) becomes U+FFFD.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> String {
        let mut buf = Vec::new();
        for &id in ids {
            if let Some(b) = self.piece_bytes(id, skip_special) {
                buf.extend_from_slice(b);
            }
        }
        String::from_utf8_lossy(&buf).into_owned()
    }

    /// The bytes token `id` stands for, or `None` when it is out of range or skipped.
    pub(crate) fn piece_bytes(&self, id: u32, skip_special: bool) -> Option<&[u8]> {
        let ty = *self.types.get(id as usize)?;
        if skip_special && ty.is_special() {
            return None;
        }
        self.bytes.get(id as usize).map(|b| &b[..])
    }

    /// The raw bytes token `id` stands for (control tokens: their text).
    pub fn token_bytes(&self, id: u32) -> Option<&[u8]> {
        self.bytes.get(id as usize).map(|b| &b[..])
    }

    /// The token's text as stored in the vocabulary (byte-level or `▁` form); "" if out of range.
    pub fn token_to_piece(&self, id: u32) -> &str {
        self.tokens.get(id as usize).map_or("", |s| s.as_str())
    }

    /// The id of a vocabulary string, exactly as stored.
    pub fn id_of(&self, piece: &str) -> Option<u32> {
        self.token_to_id.get(piece).copied()
    }

    pub fn token_type(&self, id: u32) -> Option<TokenType> {
        self.types.get(id as usize).copied()
    }

    pub fn vocab_size(&self) -> usize {
        self.tokens.len()
    }

    pub fn bos_id(&self) -> Option<u32> {
        self.bos
    }

    pub fn eos_id(&self) -> Option<u32> {
        self.eos
    }

    /// Every id that ends generation: EOS, EOT, EOM and the end-of-turn tokens known by text.
    pub fn eog_ids(&self) -> &[u32] {
        &self.eog
    }

    pub fn is_eog(&self, id: u32) -> bool {
        self.eog.binary_search(&id).is_ok()
    }

    /// Whether `encode(.., add_special = true, ..)` puts a BOS first.
    pub fn add_bos(&self) -> bool {
        self.add_bos && self.bos.is_some()
    }
}

/// SentencePiece token bytes (llama_vocab::impl::token_to_piece for SPM): `▁` is a space,
/// `<0xXX>` byte tokens are that byte, everything else its text.
fn spm_token_bytes(text: &str, ty: TokenType) -> Box<[u8]> {
    if ty == TokenType::Byte
        && let Some(hex) = text.strip_prefix("<0x").and_then(|s| s.strip_suffix('>'))
        && let Ok(b) = u8::from_str_radix(hex, 16)
    {
        return Box::new([b]);
    }
    if matches!(
        ty,
        TokenType::Normal | TokenType::UserDefined | TokenType::Undefined | TokenType::Unused
    ) {
        return text
            .replace('\u{2581}', " ")
            .into_bytes()
            .into_boxed_slice();
    }
    text.as_bytes().into()
}
