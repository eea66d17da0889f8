//! Tool prompts of the real templates: Qwen 2.5's renders `tools`, assistant `tool_calls` and
//! `tool` results exactly as transformers' jinja2 does (reference text rendered with jinja2,
//! trim_blocks + lstrip_blocks, `json.dumps` tojson), and is detected as Hermes; SmolLM2's
//! ignores `tools`, so it gets the generic format.

#![allow(clippy::unwrap_used)]

use crate::common;

use pagoda_frontend::ToolCallFormat;
use serde_json::json;

#[test]
fn qwen_renders_tools_and_tool_history_like_transformers() {
    let t = common::template(common::QWEN);
    assert!(t.renders_tools());
    assert_eq!(ToolCallFormat::detect(t.text()), ToolCallFormat::Hermes);
    let tools = json!([{"type": "function", "function": {"name": "get_weather",
        "description": "Weather <now> & 'here'",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]);
    let messages = json!([
        {"role": "user", "content": "Weather in Zürich?"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": {"city": "Zürich"}}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "21 C"}]);
    let out = t.render_json(&messages, Some(&tools), true).unwrap();
    // python: jinja2.Environment(trim_blocks=True, lstrip_blocks=True), tojson = json.dumps
    // (ensure_ascii=False), over the GGUF's tokenizer.chat_template.
    let want = "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather <now> & 'here'\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n<|im_start|>user\nWeather in Z\u{fc}rich?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Z\u{fc}rich\"}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n21 C\n</tool_response><|im_end|>\n<|im_start|>assistant\n";
    assert_eq!(out, want);
}

#[test]
fn smollm2_ignores_tools_so_it_gets_the_generic_format() {
    let t = common::template(common::SMOLLM);
    assert!(!t.renders_tools());
    assert_eq!(ToolCallFormat::detect(t.text()), ToolCallFormat::Generic);
}
