//! Which tokens end generation. GGUF names eos/eot/eom ids in metadata, but llama.cpp also marks
//! tokens by their text (llama-vocab.cpp `load`: "maintain a list of tokens that cause
//! end-of-generation"); the model (token-level stops) and the frontend must agree, so both ask here.

/// Token texts llama.cpp treats as end-of-generation, whatever the metadata says (including
/// Qwen's FIM stops).
pub const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
];

/// The sorted, deduplicated end-of-generation ids: the metadata's `special_ids` (eos, eot, eom)
/// that fall inside the vocabulary, plus every token whose text is in [`EOG_TEXTS`].
pub fn end_of_generation_ids(tokens: &[String], special_ids: &[Option<u32>]) -> Vec<u32> {
    let mut ids: Vec<u32> = special_ids
        .iter()
        .flatten()
        .copied()
        .filter(|&id| (id as usize) < tokens.len())
        .collect();
    ids.extend(
        tokens
            .iter()
            .enumerate()
            .filter(|(_, t)| EOG_TEXTS.contains(&t.as_str()))
            .map(|(id, _)| id as u32),
    );
    ids.sort_unstable();
    ids.dedup();
    ids
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_ids_and_texts_both_count() {
        let tokens: Vec<String> = ["<pad>", "<eos>", "<end_of_turn>", "hi", "<|im_end|>"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(
            end_of_generation_ids(&tokens, &[Some(1), None, Some(99)]),
            vec![1, 2, 4]
        );
    }
}
