//! Tokenization and chat templates against llama.cpp's golden outputs (shared/golden) for all
//! three models: every prompt, every tokenization mode, the templated prompt and its tokens.

#![allow(clippy::unwrap_used)]

use crate::common;

use pagoda_frontend::ChatMessage;

/// Checks every case of one golden file; returns the failures (empty = all pass).
fn check_model(model: &str, golden_file: &str) -> Vec<String> {
    let tok = common::tokenizer(model);
    let tpl = common::template(model);
    let golden = common::golden(golden_file);
    let mut failures = Vec::new();
    let mut passed = 0;
    for p in golden["prompts"].as_array().expect("prompts") {
        let id = p["id"].as_str().unwrap_or("?");
        let prompt = p["prompt"].as_str().expect("prompt");
        let t = &p["tokens"];
        let rendered = tpl
            .render(&[ChatMessage::new("user", prompt)], true)
            .expect("renders");
        let want_text = p["chat_templated_prompt"]
            .as_str()
            .expect("templated prompt");
        // llama-server tokenizes the templated prompt with add_special and parse_special.
        let cases = [
            (
                "add_special_true",
                tok.encode(prompt, true, true),
                &t["add_special_true"],
            ),
            (
                "add_special_false",
                tok.encode(prompt, false, true),
                &t["add_special_false"],
            ),
            (
                "add_special_false_parse_special_false",
                tok.encode(prompt, false, false),
                &t["add_special_false_parse_special_false"],
            ),
            (
                "chat_templated_tokens",
                tok.encode(want_text, true, true),
                &p["chat_templated_tokens_add_special_true"],
            ),
        ];
        for (what, got, want) in cases {
            let want = common::ids(want);
            if got == want {
                passed += 1;
            } else {
                failures.push(format!(
                    "{model} {id} {what}:\n  got  {got:?}\n  want {want:?}"
                ));
            }
        }
        if rendered == want_text {
            passed += 1;
        } else {
            failures.push(format!(
                "{model} {id} chat_templated_prompt:\n  got  {rendered:?}\n  want {want_text:?}"
            ));
        }
        // The decoded text round-trips.
        assert_eq!(
            tok.decode(&tok.encode(prompt, false, false), false),
            prompt,
            "{model} {id} round trip"
        );
    }
    eprintln!(
        "{model}: {passed} golden checks passed, {} failed",
        failures.len()
    );
    failures
}

#[test]
fn smollm2_matches_llama_cpp() {
    let f = check_model(common::SMOLLM, "smollm2-135m-q4_1.json");
    assert!(f.is_empty(), "{}", f.join("\n"));
}

#[test]
fn gemma3_matches_llama_cpp() {
    let f = check_model(common::GEMMA, "gemma3-270m-q4_k_m.json");
    assert!(f.is_empty(), "{}", f.join("\n"));
}

#[test]
fn qwen25_coder_matches_llama_cpp() {
    let f = check_model(common::QWEN, "qwen2.5-coder-0.5b-instruct-q4_k_m.json");
    assert!(f.is_empty(), "{}", f.join("\n"));
}

#[test]
fn template_sources_follow_the_files() {
    use pagoda_frontend::TemplateSource;
    assert_eq!(
        common::template(common::SMOLLM).source(),
        TemplateSource::Gguf
    );
    assert_eq!(
        common::template(common::QWEN).source(),
        TemplateSource::Gguf
    );
    assert_eq!(
        common::template(common::GEMMA).source(),
        TemplateSource::BuiltinGemma
    );
}
