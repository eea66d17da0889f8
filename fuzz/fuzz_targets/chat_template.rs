//! Fuzz chat-template compilation and rendering (a model file's template is untrusted): the
//! input is a template, then after a NUL byte the messages as JSON. Compiling and rendering
//! must end with text or an error within the render fuel, never a panic or a hang.

#![no_main]

include!("../inputs.rs");

libfuzzer_sys::fuzz_target!(|data: &[u8]| inputs::chat_template(data));
