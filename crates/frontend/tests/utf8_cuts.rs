//! A generation cut by `max_tokens` anywhere, also inside a multi-byte character or an emoji
//! sequence (ZWJ families, flags, skin tones, keycaps): the text never carries a U+FFFD the
//! model did not write, the streamed deltas add up to the whole text, and that text is the
//! longest whole-character prefix of the bytes generated. On Qwen2.5's byte-level BPE (the
//! issue's model) and Gemma 3's byte fallback, with the text's own tokens and one token per byte.

#![allow(clippy::unwrap_used)]

use crate::common;

use std::sync::Arc;

use pagoda_frontend::{TextStream, TextStreamOptions, Tokenizer};

const TEXT: &str = "Ça coûte 5€ · 日本語 · 한국어 · Ελληνικά · 👨‍👩‍👧‍👦 🇫🇷🇯🇵 👍🏽 1️⃣ 🏳️‍🌈 𝄞 end";

/// What a stream over `ids`, cut after the last, gives: the joined deltas and `text()`.
fn cut_stream(tok: &Arc<Tokenizer>, ids: &[u32], stop: &[&str]) -> (String, String) {
    let opts = TextStreamOptions {
        stop: stop.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    };
    let mut s = TextStream::new(Arc::clone(tok), &[], opts).unwrap();
    let mut joined = String::new();
    for &id in ids {
        joined.push_str(&s.push(id).text);
    }
    joined.push_str(&s.finish_cut().text);
    (joined, s.text().to_owned())
}

/// The longest prefix of `bytes` made of whole characters.
fn whole_prefix(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(s) => s.to_owned(),
        Err(e) => String::from_utf8(bytes[..e.valid_up_to()].to_vec()).unwrap(),
    }
}

/// The token of each byte value the vocabulary has a one-byte token for.
fn byte_tokens(tok: &Tokenizer) -> Vec<Option<u32>> {
    let mut out = vec![None; 256];
    for id in 0..tok.vocab_size() as u32 {
        if let Some(&[b]) = tok.token_bytes(id)
            && out[b as usize].is_none()
        {
            out[b as usize] = Some(id);
        }
    }
    out
}

/// Every cut of `ids` (after 0, 1, ... all tokens) meets the rule.
fn check_every_cut(name: &str, tok: &Arc<Tokenizer>, ids: &[u32]) {
    let mut bytes = Vec::new();
    for k in 0..=ids.len() {
        if k > 0 {
            bytes.extend_from_slice(tok.token_bytes(ids[k - 1]).unwrap());
        }
        let want = whole_prefix(&bytes);
        let (joined, whole) = cut_stream(tok, &ids[..k], &[]);
        assert_eq!(
            joined, whole,
            "{name}: cut after {k} tokens: stream != text"
        );
        assert_eq!(whole, want, "{name}: cut after {k} tokens");
        assert!(
            !whole.contains('\u{FFFD}'),
            "{name}: U+FFFD after {k} tokens"
        );
        // The same with a stop string that never matches but holds text back.
        let (joined, whole) = cut_stream(tok, &ids[..k], &["🇫🇷🇩🇪"]);
        assert_eq!(
            (joined.as_str(), whole.as_str()),
            (want.as_str(), want.as_str())
        );
    }
}

#[test]
fn cuts_inside_characters_drop_the_unfinished_bytes_and_stream_the_same_text() {
    for file in [common::QWEN, common::GEMMA] {
        let tok = Arc::new(common::tokenizer(file));
        // The text as the model would write it (its own tokens, some of them byte pieces).
        let ids = tok.encode(TEXT, false, false);
        check_every_cut(file, &tok, &ids);
        // One token per byte: a cut at every byte offset of every character.
        let map = byte_tokens(&tok);
        let per_byte: Vec<u32> = TEXT.bytes().map(|b| map[b as usize].unwrap()).collect();
        check_every_cut(&format!("{file} per byte"), &tok, &per_byte);
    }
}

#[test]
fn a_model_that_ends_inside_a_character_still_gets_its_replacement() {
    // `finish` (an end-of-generation token, not a cut) keeps the lossy decode: the model wrote
    // those bytes and nothing more.
    let tok = Arc::new(common::tokenizer(common::QWEN));
    let map = byte_tokens(&tok);
    let ids: Vec<u32> = "日"
        .bytes()
        .take(2)
        .map(|b| map[b as usize].unwrap())
        .collect();
    let mut s = TextStream::new(Arc::clone(&tok), &[], TextStreamOptions::default()).unwrap();
    for &id in &ids {
        assert_eq!(s.push(id).text, "");
    }
    assert_eq!(s.finish().text, "\u{FFFD}");
}
