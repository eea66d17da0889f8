//! Reading prompt files: JSON lines (`"text"`, `{"prompt": ..., "output_len"?: N}` or a ShareGPT
//! record per line) and ShareGPT JSON arrays (`[{"conversations": [{"from": "human", "value":
//! ...}, {"from": "gpt", "value": ...}]}]`). A ShareGPT record gives its first human turn as the
//! prompt and the reply that follows as the reference answer (whose length sets `max_tokens`,
//! as in vLLM's `bench serve`).

use serde_json::Value;

/// One usable prompt of a dataset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The prompt text.
    pub prompt: String,
    /// An explicit output length from the file.
    pub output_len: Option<u32>,
    /// A reference answer whose token count can serve as the output length.
    pub reference_answer: Option<String>,
}

/// Parse a whole dataset file. Records without a usable prompt are skipped.
pub fn parse(text: &str) -> Result<Vec<Entry>, String> {
    if text.trim_start().starts_with('[') {
        let records: Vec<Value> =
            serde_json::from_str(text).map_err(|e| format!("not a JSON array: {e}"))?;
        return Ok(records.iter().filter_map(entry_from).collect());
    }
    let mut entries = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let value: Value =
            serde_json::from_str(line).map_err(|e| format!("line {}: {e}", i + 1))?;
        entries.extend(entry_from(&value));
    }
    Ok(entries)
}

fn entry_from(value: &Value) -> Option<Entry> {
    match value {
        Value::String(s) if !s.trim().is_empty() => Some(Entry {
            prompt: s.clone(),
            output_len: None,
            reference_answer: None,
        }),
        Value::Object(map) => {
            if let Some(Value::Array(turns)) = map.get("conversations") {
                return sharegpt_entry(turns);
            }
            let prompt = map.get("prompt").or_else(|| map.get("text"))?.as_str()?;
            if prompt.trim().is_empty() {
                return None;
            }
            let output_len = ["output_len", "max_tokens"]
                .iter()
                .find_map(|k| map.get(*k).and_then(Value::as_u64))
                .map(|n| n.min(u64::from(u32::MAX)) as u32);
            let reference_answer = ["completion", "response"]
                .iter()
                .find_map(|k| map.get(*k)?.as_str().map(str::to_owned));
            Some(Entry {
                prompt: prompt.to_owned(),
                output_len,
                reference_answer,
            })
        }
        _ => None,
    }
}

fn sharegpt_entry(turns: &[Value]) -> Option<Entry> {
    let speaker = |t: &Value| {
        t.get("from")
            .or_else(|| t.get("role"))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let text = |t: &Value| {
        t.get("value")
            .or_else(|| t.get("content"))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let first_human = turns
        .iter()
        .position(|t| matches!(speaker(t).as_deref(), Some("human" | "user")))?;
    let prompt = text(&turns[first_human])?;
    if prompt.trim().is_empty() {
        return None;
    }
    let reference_answer = turns[first_human + 1..]
        .iter()
        .find(|t| matches!(speaker(t).as_deref(), Some("gpt" | "assistant" | "chatgpt")))
        .and_then(text);
    Some(Entry {
        prompt,
        output_len: None,
        reference_answer,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn json_lines_of_every_shape() {
        let text = r#""plain string prompt"
{"prompt": "with length", "output_len": 12}
{"prompt": "   "}

{"conversations": [{"from": "system", "value": "s"}, {"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello there"}]}
42
"#;
        let e = parse(text).unwrap();
        assert_eq!(e.len(), 3);
        assert_eq!(e[0].prompt, "plain string prompt");
        assert_eq!(e[1].output_len, Some(12));
        assert_eq!(e[2].prompt, "hi");
        assert_eq!(e[2].reference_answer.as_deref(), Some("hello there"));
        assert!(parse("{broken").unwrap_err().starts_with("line 1"));
    }

    #[test]
    fn sharegpt_array() {
        let text = r#"[
          {"id": "a", "conversations": [{"from": "human", "value": "Q1"}, {"from": "gpt", "value": "A1"}]},
          {"id": "b", "conversations": [{"from": "gpt", "value": "only a reply"}]},
          {"id": "c", "conversations": [{"role": "user", "content": "Q3"}]}
        ]"#;
        let e = parse(text).unwrap();
        assert_eq!(
            e.iter().map(|e| e.prompt.as_str()).collect::<Vec<_>>(),
            vec!["Q1", "Q3"]
        );
        assert_eq!(e[1].reference_answer, None);
    }
}
