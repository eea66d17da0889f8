//! Byte-level BPE (`tokenizer.ggml.model = gpt2`) on the `tokenizers` crate: the model is built
//! from the GGUF tokens and merges, the pre-tokenizer from llama.cpp's regexes for
//! `tokenizer.ggml.pre` (llama-vocab.cpp llm_tokenizer_bpe).

use std::collections::HashMap;

use tokenizers::models::bpe::BPE;
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{SplitDelimiterBehavior, Tokenizer as HfTokenizer};

use crate::error::TokenizerError;

/// GPT-2's word regex, with the trailing `|\s+` that llama.cpp's hand-written matcher for it
/// implements (unicode.cpp unicode_regex_split_custom_gpt2) and HF's ByteLevel uses.
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";
/// llama-vocab.cpp LLAMA_VOCAB_PRE_TYPE_QWEN2 (the tokenizer.json original, case-insensitive group).
const QWEN2: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// llama-vocab.cpp LLAMA_VOCAB_PRE_TYPE_LLAMA3.
const LLAMA3: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The regexes applied in turn (each splits the pieces of the previous) for a `pre` name.
fn pre_tokenizer_regexes(pre: &str) -> Option<Vec<&'static str>> {
    Some(match pre {
        // LLAMA_VOCAB_PRE_TYPE_SMOLLM and friends: every digit alone, then GPT-2.
        "smollm" | "starcoder" | "refact" | "command-r" | "codeshell" | "exaone" | "minerva-7b" => {
            vec![r"\p{N}", GPT2]
        }
        "gpt-2" | "gpt2" | "mpt" | "olmo" | "jais" | "trillion" => vec![GPT2],
        "qwen2" | "deepseek-r1-qwen" | "stablelm2" | "hunyuan" => vec![QWEN2],
        "llama3" | "llama-bpe" | "falcon3" | "pixtral" | "smaug-bpe" => vec![LLAMA3],
        // LLAMA_VOCAB_PRE_TYPE_DEFAULT for BPE vocabularies.
        "default" => vec![r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", "[0-9][0-9][0-9]"],
        _ => return None,
    })
}

/// Byte-level BPE over plain-text fragments (special tokens are split out beforehand).
pub(crate) struct ByteLevelBpe {
    hf: HfTokenizer,
    /// Token of each byte's stand-in character, for the never-expected failure path.
    byte_tokens: [Option<u32>; 256],
}

impl ByteLevelBpe {
    pub(crate) fn new(
        tokens: &[String],
        merges: &[String],
        pre: &str,
        token_to_id: &HashMap<String, u32>,
    ) -> Result<Self, TokenizerError> {
        let regexes = pre_tokenizer_regexes(pre)
            .ok_or_else(|| TokenizerError::UnsupportedPreTokenizer(pre.to_string()))?;
        let vocab: tokenizers::models::bpe::Vocab = tokens
            .iter()
            .enumerate()
            .map(|(id, t)| (t.clone(), id as u32))
            .collect();
        let mut pairs = Vec::with_capacity(merges.len());
        for (index, rule) in merges.iter().enumerate() {
            let (a, b) = rule
                .split_once(' ')
                .ok_or_else(|| TokenizerError::BadMerge {
                    index,
                    rule: rule.clone(),
                })?;
            pairs.push((a.to_string(), b.to_string()));
        }
        let model = BPE::builder()
            .vocab_and_merges(vocab, pairs)
            .build()
            .map_err(|e| TokenizerError::Bpe(e.to_string()))?;

        let mut steps: Vec<PreTokenizerWrapper> = Vec::new();
        for re in regexes {
            let split = Split::new(
                SplitPattern::Regex(re.to_string()),
                SplitDelimiterBehavior::Isolated,
                false,
            )
            .map_err(|e| TokenizerError::Bpe(format!("pre-tokenizer regex {re:?}: {e}")))?;
            steps.push(split.into());
        }
        // The regexes already split; ByteLevel only maps bytes to their stand-in characters.
        steps.push(ByteLevel::new(false, false, false).into());
        let mut hf = HfTokenizer::new(model);
        hf.with_pre_tokenizer(Some(Sequence::new(steps)));

        let map = crate::byte_level::byte_to_char();
        let mut byte_tokens = [None; 256];
        for (b, slot) in byte_tokens.iter_mut().enumerate() {
            *slot = token_to_id.get(map[b].to_string().as_str()).copied();
        }
        Ok(Self { hf, byte_tokens })
    }

    /// Tokenizes one plain-text fragment into `out`.
    pub(crate) fn encode(&self, fragment: &str, out: &mut Vec<u32>) {
        match self.hf.encode_fast(fragment, false) {
            Ok(enc) => out.extend_from_slice(enc.get_ids()),
            Err(_) => {
                // The pipeline has no fallible step for valid UTF-8 input; should it ever fail,
                // one token per byte still round-trips the text.
                debug_assert!(false, "tokenizers failed on a plain-text fragment");
                out.extend(
                    fragment
                        .bytes()
                        .filter_map(|b| self.byte_tokens[usize::from(b)]),
                );
            }
        }
    }
}
