//! pagoda-structured on the real tokenizers: the token trie's bytes for byte-level BPE (SmolLM2,
//! Qwen) and SentencePiece (Gemma) vocabularies, errors that name the problem, the compile
//! cache, and matchers that accept valid text token by token and refuse invalid text.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::sync::Arc;

use pagoda_frontend::Tokenizer;
use pagoda_structured::{Constraint, StructuredError, StructuredOutputs, token_trie_words};

fn model_dir() -> PathBuf {
    match std::env::var_os("PAGODA_MODEL_DIR") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/pagoda/models"),
    }
}

fn tokenizer(file: &str) -> Arc<Tokenizer> {
    let path = model_dir().join(file);
    assert!(
        path.exists(),
        "model file {} is missing: run scripts/fetch-models.sh",
        path.display()
    );
    let gguf = pagoda_gguf::GgufFile::open(&path).unwrap();
    Arc::new(Tokenizer::from_gguf(&gguf).unwrap())
}

const SMOLLM2: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
const QWEN2: &str = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf";
const GEMMA3: &str = "gemma-3-270m-q4_k_m.gguf";

/// Feeds `text`'s tokens through a fresh matcher of `c`, checking each is allowed first; then
/// returns whether the grammar would accept ending there (EOS allowed).
fn accepts(so: &StructuredOutputs, tok: &Tokenizer, c: &Constraint, text: &str) -> bool {
    let mut m = so.compile(c).unwrap().matcher();
    for t in tok.encode(text, false, false) {
        if !m.is_allowed(t).unwrap() {
            return false;
        }
        m.consume(t).unwrap();
    }
    m.is_finished() || m.is_allowed(m.eos_token()).unwrap()
}

#[test]
fn trie_words_are_raw_bytes_with_special_markers() {
    for file in [SMOLLM2, QWEN2, GEMMA3] {
        let tok = tokenizer(file);
        let words = token_trie_words(&tok);
        assert_eq!(words.len(), tok.vocab_size());
        // Every word of a text round-trips through the trie's bytes.
        let text = "{\"name\": \"Zoë\", \"n\": [1, 2]}\n\tend";
        let ids = tok.encode(text, false, false);
        let bytes: Vec<u8> = ids
            .iter()
            .flat_map(|&i| words[i as usize].clone())
            .collect();
        assert_eq!(bytes, text.as_bytes(), "{file}");
        for &eog in tok.eog_ids() {
            assert_eq!(
                words[eog as usize][0], 0xFF,
                "{file}: EOG {eog} is not marked special"
            );
        }
    }
    // Qwen's <tool_call> is user-defined text, as in HF; its unused slots have no bytes.
    let qwen = tokenizer(QWEN2);
    let words = token_trie_words(&qwen);
    let tc = qwen.id_of("<tool_call>").unwrap();
    assert_eq!(words[tc as usize], b"<tool_call>");
    assert!(words[151_700].is_empty());
}

#[test]
fn invalid_constraints_name_the_problem() {
    let so = StructuredOutputs::new(tokenizer(SMOLLM2));
    let cases: Vec<(Constraint, &str)> = vec![
        (
            Constraint::JsonSchema("{not json".into()),
            "invalid JSON schema: not JSON",
        ),
        (
            Constraint::JsonSchema("42".into()),
            "invalid JSON schema: a schema is an object",
        ),
        (
            Constraint::JsonSchema(r#"{"type": "frobnicate"}"#.into()),
            "invalid JSON schema:",
        ),
        (
            Constraint::JsonSchema(r##"{"$ref": "#/$defs/missing"}"##.into()),
            "invalid JSON schema:",
        ),
        (Constraint::Regex("(ab".into()), "invalid regex:"),
        (Constraint::Regex("a{5,2}".into()), "invalid regex:"),
        (
            Constraint::Grammar("start: foo\n".into()),
            "invalid grammar:",
        ),
        (
            Constraint::Grammar("start: \"a\" |\n  | ((\n".into()),
            "invalid grammar:",
        ),
        (
            Constraint::Grammar("  ".into()),
            "invalid grammar: the grammar is empty",
        ),
        (
            Constraint::Choice(vec![]),
            "invalid choice: the list is empty",
        ),
        (
            Constraint::Choice(vec!["a".into(), String::new()]),
            "invalid choice: choice 1",
        ),
    ];
    for (c, want) in cases {
        let err = so.compile(&c).unwrap_err();
        let msg = err.to_string();
        assert!(msg.starts_with(want), "{c:?}: {msg}");
        assert!(!matches!(err, StructuredError::Matcher(_)));
    }
    assert_eq!(so.num_cached(), 0, "errors are not cached");
}

#[test]
fn same_constraint_compiles_once() {
    let so = StructuredOutputs::new(tokenizer(SMOLLM2));
    so.warm_up().unwrap();
    let c = Constraint::JsonSchema(
        r#"{"type": "object", "properties": {"a": {"type": "integer"}}}"#.into(),
    );
    let first = so.compile(&c).unwrap();
    let again = so.compile(&c.clone()).unwrap();
    assert!(Arc::ptr_eq(&first, &again));
    assert_eq!(so.num_cached(), 1);
    // The cache is bounded.
    for i in 0..100 {
        so.compile(&Constraint::Regex(format!("a{{{i}}}"))).unwrap();
    }
    assert_eq!(so.num_cached(), 64);
}

#[test]
fn matchers_accept_valid_text_and_refuse_the_rest() {
    for file in [SMOLLM2, QWEN2] {
        let tok = tokenizer(file);
        let so = StructuredOutputs::new(tok.clone());
        let schema = Constraint::JsonSchema(
            r#"{"type": "object", "properties": {"name": {"type": "string"},
                "age": {"type": "integer", "minimum": 0}}, "required": ["name", "age"],
                "additionalProperties": false}"#
                .into(),
        );
        assert!(
            accepts(&so, &tok, &schema, r#"{"name": "Bob", "age": 42}"#),
            "{file}"
        );
        assert!(!accepts(&so, &tok, &schema, r#"{"name": "Bob"}"#), "{file}");
        assert!(
            !accepts(&so, &tok, &schema, r#"{"name": "Bob", "age": -1}"#),
            "{file}"
        );
        // Compact separators only (whitespace_flexible off).
        assert!(
            !accepts(&so, &tok, &schema, r#"{"name":"Bob","age":42}"#),
            "{file}"
        );
        let any = Constraint::JsonObject;
        assert!(
            accepts(&so, &tok, &any, r#"{"x": [1, {"y": null}]}"#),
            "{file}"
        );
        assert!(!accepts(&so, &tok, &any, "[1]"), "{file}");
        let rx = Constraint::Regex(r"\d{3}-[a-z]+".into());
        assert!(accepts(&so, &tok, &rx, "123-abc"), "{file}");
        assert!(!accepts(&so, &tok, &rx, "12-abc"), "{file}");
        let choice = Constraint::Choice(vec!["yes".into(), "no".into(), "say \"maybe\"\\".into()]);
        assert!(accepts(&so, &tok, &choice, "no"), "{file}");
        assert!(accepts(&so, &tok, &choice, "say \"maybe\"\\"), "{file}");
        assert!(!accepts(&so, &tok, &choice, "nope"), "{file}");
        let lark = Constraint::Grammar(
            "start: \"let \" NAME \" = \" NUM \";\"\nNAME: /[a-z]+/\nNUM: /[0-9]+/\n".into(),
        );
        assert!(accepts(&so, &tok, &lark, "let x = 42;"), "{file}");
        assert!(!accepts(&so, &tok, &lark, "let X = 42;"), "{file}");
    }
}

#[test]
fn a_finished_grammar_allows_only_eos() {
    let tok = tokenizer(SMOLLM2);
    let so = StructuredOutputs::new(tok.clone());
    let mut m = so
        .compile(&Constraint::Choice(vec!["yes".into()]))
        .unwrap()
        .matcher();
    for t in tok.encode("yes", false, false) {
        m.consume(t).unwrap();
    }
    assert!(m.is_finished());
    assert_eq!(m.num_allowed().unwrap(), tok.eog_ids().len().clamp(1, 2));
    assert!(m.is_allowed(m.eos_token()).unwrap());
    assert!(tok.is_eog(m.eos_token()));
    let mut logits = vec![1.0f32; tok.vocab_size() + 7];
    m.apply_mask(&mut logits).unwrap();
    let allowed: Vec<usize> = (0..logits.len())
        .filter(|&i| logits[i].is_finite())
        .collect();
    assert!(allowed.iter().all(|&i| tok.is_eog(i as u32)), "{allowed:?}");
}

/// Regression (hostile client): constraints beyond the parser's limits are found by `compile`,
/// as `TooLarge` naming the limit, and are not cached; just below the limit still works. Before,
/// they compiled and failed the first sampling step (`Matcher` error: a 500, or an error event
/// first in a 200 stream).
#[test]
fn constraints_beyond_the_parser_limits_are_too_large() {
    let tok = tokenizer(SMOLLM2);
    let so = StructuredOutputs::new(tok.clone());
    let words = |n: usize, prefix: &str| (0..n).map(|i| format!("{prefix}{i}")).collect::<Vec<_>>();
    let alternatives = |n: usize, prefix: &str| {
        words(n, prefix)
            .iter()
            .map(|w| format!("\"{w}\""))
            .collect::<Vec<_>>()
            .join(" | ")
    };
    let cases = [
        (
            Constraint::Choice(words(2500, "option ")),
            "max_items_in_row",
            "2500 choices",
        ),
        (
            Constraint::Grammar(format!("start: word\nword: {}\n", alternatives(3000, "w"))),
            "max_items_in_row",
            "has 3000 alternatives",
        ),
        // Reached only after a free-form lexeme: found in the compiled grammar, not by luck.
        (
            Constraint::Grammar(format!(
                "start: NAME \": \" word\nNAME: /[a-z]+/\nword: {}\n",
                alternatives(3000, "w")
            )),
            "max_items_in_row",
            "rule `word` has 3000 alternatives",
        ),
        // Two rules that fit alone but not predicted together: the rehearsed first step.
        (
            Constraint::Grammar(format!(
                "start: a | b\na: {}\nb: {}\n",
                alternatives(1200, "w"),
                alternatives(1200, "v")
            )),
            "max_items_in_row",
            "Current row has",
        ),
        (
            Constraint::Regex(format!("({})", words(200_000, "w").join("|"))),
            "initial_lexer_fuel",
            "too big",
        ),
    ];
    for (c, limit, detail) in cases {
        let kind = c.kind();
        match so.compile(&c) {
            Err(e @ StructuredError::TooLarge { .. }) => {
                let msg = e.to_string();
                assert!(msg.contains(detail), "{kind}: {msg}");
                assert!(
                    msg.contains(&format!("(limit `{limit}` = ")),
                    "{kind}: {msg}"
                );
                assert!(msg.len() < 400, "{kind}: a message of {} bytes", msg.len());
            }
            Err(e) => panic!("{kind}: {e}"),
            Ok(_) => panic!("{kind} compiled"),
        }
    }
    assert_eq!(so.num_cached(), 0, "errors are not cached");
    let fine = Constraint::Choice(words(1999, "w"));
    assert!(accepts(&so, &tok, &fine, "w1998"));
    assert!(!accepts(&so, &tok, &fine, "w1999"));
    let fine = Constraint::Grammar(format!("start: word\nword: {}\n", alternatives(1998, "w")));
    assert!(accepts(&so, &tok, &fine, "w1997"));
}
