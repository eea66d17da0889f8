//! Fuzz chat-template compilation and rendering (a model file's template is untrusted): the
//! input is a template, then after a NUL byte the messages as JSON. Compiling and rendering
//! must end with text or an error within the render fuel, never a panic or a hang.

#![no_main]

use libfuzzer_sys::fuzz_target;
use pagoda_frontend::{ChatTemplate, TemplateSource};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (template, messages) = text.split_once('\0').unwrap_or((text, ""));
    let Ok(t) = ChatTemplate::new(template, TemplateSource::Gguf, "<s>", "</s>") else {
        return;
    };
    let messages = serde_json::from_str(messages)
        .unwrap_or_else(|_| serde_json::json!([{"role": "user", "content": "hi"}]));
    let _ = t.render_json(&messages, None, true);
});
