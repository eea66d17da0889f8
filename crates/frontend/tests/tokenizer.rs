//! Tokenizer behaviour on the real models: NOTES.md's llama.cpp reference ids for Gemma,
//! round trips over varied text, special-token handling, EOG ids and streaming decode.

#![allow(clippy::unwrap_used)]

use crate::common;

use pagoda_frontend::{DecodeStream, TokenType, Tokenizer};

const TEXTS: &[&str] = &[
    "Hello world! How are you today?",
    "  leading spaces and\ttabs\n\nnewlines",
    "trailing spaces   \n\n\n\n   ",
    "naïve café — 日本語 🤖 👩‍💻 🇯🇵",
    "Ünïcödé àccents “smart quotes” … façade",
    "中文分词测试：你好，世界！これは日本語の文章です。한국어 문장입니다.",
    "Привет! Как дела? Ελληνικά και العربية",
    "fn main() {\n    let v: Vec<i32> = vec![1, 2, 3];\n\tprintln!(\"{v:?}\");\n}\n",
    "<div class=\"x\"><b>bold</b> & <i>it</i></div>",
    "numbers 1234567890 3.14159 -42 1e-9",
    "{\"name\": \"Bob\", \"age\": 42, \"tags\": [\"a\", \"b\"]}",
    "\u{0}\u{1}control\u{7f} chars\r\n",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 math 𝛼𝛽𝛾 and rare 𐍈 ꙮ",
    "",
];

fn all() -> Vec<(&'static str, Tokenizer)> {
    [common::SMOLLM, common::GEMMA, common::QWEN]
        .into_iter()
        .map(|m| (m, common::tokenizer(m)))
        .collect()
}

#[test]
fn gemma_reference_ids_from_llama_cpp() {
    let tok = common::tokenizer(common::GEMMA);
    let cases: &[(&str, &[u32])] = &[
        (
            "Hello world! How are you today?",
            &[9259, 1902, 236888, 2088, 659, 611, 3124, 236881],
        ),
        (
            "The year 2024 had 366 days.",
            &[
                818, 1051, 236743, 236778, 236771, 236778, 236812, 1053, 236743, 236800, 236825,
                236825, 2668, 236761,
            ],
        ),
        (
            "  leading spaces and\ttabs\n\nnewlines",
            &[138, 26016, 9952, 532, 255968, 39218, 108, 208697],
        ),
        (
            "naïve café — 日本語 🤖",
            &[
                1789, 238527, 560, 33443, 2192, 33375, 238582, 236743, 246143,
            ],
        ),
        (
            "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n",
            &[105, 2364, 107, 10979, 106, 107, 105, 4368, 107],
        ),
        (
            "{\"name\": \"Bob\", \"age\": 42}",
            &[
                14937, 1201, 1083, 623, 43930, 827, 623, 676, 1083, 236743, 236812, 236778, 236783,
            ],
        ),
    ];
    for (text, want) in cases {
        assert_eq!(tok.encode(text, false, true), *want, "{text:?}");
    }
    assert_eq!(tok.encode("Hi", true, true), vec![2, 10979]);
}

#[test]
fn decode_inverts_encode() {
    for (model, tok) in all() {
        for text in TEXTS {
            for parse_special in [false, true] {
                let ids = tok.encode(text, false, parse_special);
                assert_eq!(tok.decode(&ids, false), *text, "{model} {text:?}");
            }
        }
        // A long whitespace run is longer than any whitespace token.
        let long = format!("a{}b\n{}c", " ".repeat(100), "\n".repeat(70));
        assert_eq!(
            tok.decode(&tok.encode(&long, false, false), false),
            long,
            "{model}"
        );
    }
}

#[test]
fn byte_fallback_covers_characters_outside_the_vocabulary() {
    let tok = common::tokenizer(common::GEMMA);
    // The Yi syllable U+A000 is no Gemma piece: it must come out as its 3 UTF-8 byte tokens.
    let ids = tok.encode("\u{A000}", false, false);
    assert_eq!(ids.len(), 3, "{ids:?}");
    for &id in &ids {
        assert_eq!(tok.token_type(id), Some(TokenType::Byte));
        assert!((238..=493).contains(&id));
    }
    assert_eq!(tok.decode(&ids, false), "\u{A000}");
}

#[test]
fn special_tokens_are_parsed_only_when_asked() {
    for (model, tok) in all() {
        let eos = tok.eos_id().expect("eos");
        let eos_text = tok.token_to_piece(eos).to_string();
        let text = format!("a{eos_text}b");
        assert!(tok.encode(&text, false, true).contains(&eos), "{model}");
        assert!(!tok.encode(&text, false, false).contains(&eos), "{model}");
        assert_eq!(tok.id_of(&eos_text), Some(eos));
        // skip_special drops the control token's text; otherwise it is kept.
        let ids = tok.encode(&text, false, true);
        assert_eq!(tok.decode(&ids, true), "ab", "{model}");
        assert_eq!(tok.decode(&ids, false), text, "{model}");
        assert_eq!(tok.token_bytes(eos), Some(eos_text.as_bytes()));
    }
}

#[test]
fn metadata_ids_and_end_of_generation() {
    let smol = common::tokenizer(common::SMOLLM);
    assert_eq!(
        (
            smol.vocab_size(),
            smol.bos_id(),
            smol.eos_id(),
            smol.add_bos()
        ),
        (49152, Some(1), Some(2), false)
    );
    assert_eq!(smol.eog_ids(), &[0, 2]); // <|endoftext|>, <|im_end|>
    let gemma = common::tokenizer(common::GEMMA);
    assert_eq!(
        (
            gemma.vocab_size(),
            gemma.bos_id(),
            gemma.eos_id(),
            gemma.add_bos()
        ),
        (262144, Some(2), Some(1), true)
    );
    assert_eq!(gemma.eog_ids(), &[1, 106]); // <eos>, <end_of_turn>
    assert_eq!(gemma.id_of("<end_of_turn>"), Some(106));
    assert_eq!(gemma.token_to_piece(107), "\n");
    let qwen = common::tokenizer(common::QWEN);
    assert_eq!(qwen.vocab_size(), 151936);
    for t in [
        "<|im_end|>",
        "<|endoftext|>",
        "<|fim_pad|>",
        "<|repo_name|>",
        "<|file_sep|>",
    ] {
        assert!(qwen.is_eog(qwen.id_of(t).expect(t)), "{t}");
    }
    assert!(!qwen.is_eog(qwen.id_of("<|im_start|>").expect("im_start")));
}

/// Streams `ids` one at a time and checks every piece is whole UTF-8 adding up to `decode`.
fn stream(tok: &Tokenizer, ids: &[u32]) -> Vec<String> {
    let mut ds = DecodeStream::new(tok, false, &[]);
    let mut pieces: Vec<String> = ids.iter().filter_map(|&id| ds.step(id)).collect();
    pieces.extend(ds.flush());
    assert_eq!(pieces.concat(), tok.decode(ids, false));
    pieces
}

#[test]
fn decode_stream_holds_back_partial_characters() {
    let gemma = common::tokenizer(common::GEMMA);
    // Byte-fallback tokens: 3 tokens for one character.
    let ids = gemma.encode("x\u{A000}y", false, false);
    let mut ds = DecodeStream::new(&gemma, false, &[]);
    let out: Vec<Option<String>> = ids.iter().map(|&id| ds.step(id)).collect();
    assert_eq!(
        out,
        vec![
            Some("x".into()),
            None,
            None,
            Some("\u{A000}".into()),
            Some("y".into())
        ]
    );
    assert_eq!(ds.flush(), None);

    // Byte-level BPE: SmolLM2 splits emoji bytes across tokens (golden pieces [32,240,159], [141]...).
    let smol = common::tokenizer(common::SMOLLM);
    let text = "Emoji test: 🍕🚀😀👩\u{200d}💻 日本語";
    let ids = smol.encode(text, false, false);
    assert!(
        ids.iter()
            .any(|&id| std::str::from_utf8(smol.token_bytes(id).unwrap_or_default()).is_err())
    );
    let pieces = stream(&smol, &ids);
    assert_eq!(pieces.concat(), text);
    for (model, tok) in all() {
        for t in TEXTS {
            let ids = tok.encode(t, false, false);
            assert_eq!(stream(&tok, &ids).concat(), *t, "{model}");
        }
    }
}

#[test]
fn decode_stream_finishes_a_character_the_prompt_began() {
    let gemma = common::tokenizer(common::GEMMA);
    let ids = gemma.encode("\u{A000}", false, false);
    let mut ds = DecodeStream::new(&gemma, false, &ids[..2]);
    assert_eq!(ds.step(ids[2]), Some("\u{A000}".into()));
    // An unfinished character at the end of the stream is flushed lossily.
    let mut ds = DecodeStream::new(&gemma, false, &[]);
    assert_eq!(ds.step(ids[0]), None);
    assert_eq!(ds.flush(), Some("\u{FFFD}".into()));
    // Invalid bytes in the middle are replaced, not held forever.
    let b0 = ids[0];
    let x = gemma.encode("x", false, false)[0];
    let mut ds = DecodeStream::new(&gemma, false, &[]);
    assert_eq!(ds.step(b0), None);
    assert_eq!(ds.step(x), Some("\u{FFFD}x".into()));
}

/// Inputs the fuzzer (`fuzz/`, target `tokenizer_json`) found to crash the tokenizer.json
/// reader: each must now be an error, without a panic.
#[test]
fn fuzzed_tokenizer_json_regressions_are_errors() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/regressions");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "input") {
            let text = std::fs::read_to_string(&path).unwrap();
            assert!(
                pagoda_frontend::HfTokenizer::from_json(&text).is_err(),
                "{}",
                path.display()
            );
            seen += 1;
        }
    }
    assert!(seen > 0, "no regression inputs in {}", dir.display());
}

/// A WordPiece tokenizer.json small enough to write out (BERT's normalizer and pre-tokenizer).
const TINY_WORDPIECE: &str = r###"{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],
"normalizer":{"type":"BertNormalizer","clean_text":true,"handle_chinese_chars":true,"strip_accents":null,"lowercase":true},
"pre_tokenizer":{"type":"BertPreTokenizer"},"post_processor":null,"decoder":null,
"model":{"type":"WordPiece","unk_token":"[UNK]","continuing_subword_prefix":"##","max_input_chars_per_word":100,
"vocab":{"[UNK]":0,"the":1,"river":2,"rose":3,"##s":4,".":5,"a":6,"bridge":7,"lake":8}}}"###;

#[test]
fn encode_many_gives_each_text_its_own_ids_in_order_on_any_thread_count() {
    let tok = pagoda_frontend::HfTokenizer::from_json(TINY_WORDPIECE).unwrap();
    // Long enough in all (over 8 KiB a thread) for the threads to be used, uneven lengths.
    let texts: Vec<String> = (0..37)
        .map(|i| format!("{i} The river roses. ") + &"a bridge lake rivers ".repeat(i * 53 % 200))
        .collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let want: Vec<Vec<u32>> = refs.iter().map(|t| tok.encode(t).unwrap()).collect();
    for threads in [1, 2, 3, 8, 64] {
        let got: Vec<Vec<u32>> = tok
            .encode_many(&refs, threads)
            .into_iter()
            .map(Result::unwrap)
            .collect();
        assert_eq!(got, want, "{threads} threads");
    }
    assert!(tok.encode_many(&[], 2).is_empty());
}
