//! A chat template is code from a model file: one that loops, recurses or writes without end
//! fails its render with a clear error in bounded time (minijinja's fuel and recursion limit)
//! instead of hanging or exhausting the worker, while the real Qwen 2.5 template still renders
//! a long conversation with tools well inside the budget.

#![allow(clippy::unwrap_used)]

use crate::common;

use pagoda_frontend::{ChatTemplate, TemplateError, TemplateSource};
use serde_json::json;

fn render(template: &str) -> Result<String, TemplateError> {
    let t = ChatTemplate::new(template, TemplateSource::Gguf, "<s>", "</s>").unwrap();
    t.render_json(&json!([{"role": "user", "content": "Hi"}]), None, true)
}

#[test]
fn hostile_templates_fail_their_render() {
    let cases = [
        // 10^10 iterations
        (
            "loop",
            "{% for i in range(100000) %}{% for j in range(100000) %}{{ j }}{% endfor %}{% endfor %}",
        ),
        // unbounded recursion through a macro
        (
            "recursion",
            "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
        ),
        // 10 GB of output, 100 KB at a time
        (
            "output",
            "{% for i in range(100000) %}{{ 'x' * 100000 }}{% endfor %}",
        ),
        // one huge value
        ("value", "{% set s = 'x' * 10000000000 %}{{ s | length }}"),
    ];
    for (name, template) in cases {
        let err = render(template).expect_err(name);
        assert!(matches!(err, TemplateError::Render { .. }), "{name}: {err}");
        println!("{name}: {err}");
    }
}

#[test]
fn a_long_conversation_with_tools_renders_within_the_budget() {
    let t = common::template(common::QWEN);
    let tools: Vec<_> = (0..50)
        .map(|i| {
            json!({"type": "function", "function": {"name": format!("tool_{i}"),
            "description": "d".repeat(200),
            "parameters": {"type": "object", "properties": {"x": {"type": "string"}}}}})
        })
        .collect();
    let messages: Vec<_> = (0..5000)
        .map(|i| {
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            json!({"role": role, "content": format!("message {i} {}", "w".repeat(100))})
        })
        .collect();
    let out = t
        .render_json(&json!(messages), Some(&json!(tools)), true)
        .unwrap();
    assert!(out.contains("message 4999") && out.contains("tool_49"));
}
