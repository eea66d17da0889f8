//! sentence-transformers' prompts (`config_sentence_transformers.json`: `prompts`, a name to
//! the text put before each input, and `default_prompt_name`), written into the GGUF as
//! `pagoda.embedding.prompt_names` / `pagoda.embedding.prompts` (two string arrays, same order)
//! and `pagoda.embedding.default_prompt_name`, so a server can select one per request.

use std::path::Path;

use pagoda_gguf::{GgufAssembly, MetaArray, MetaValue};

use crate::HfError;

/// A model's prompts: (name, text) in the file's order, and the one applied by default.
#[derive(Debug, Default, PartialEq)]
pub struct Prompts {
    pub prompts: Vec<(String, String)>,
    pub default_name: Option<String>,
}

/// The prompts of the sentence-transformers directory `dir` (none without the file).
pub fn read_prompts(dir: &Path) -> Result<Prompts, HfError> {
    let path = dir.join("config_sentence_transformers.json");
    if !path.is_file() {
        return Ok(Prompts::default());
    }
    let bad = |message: String| HfError::BadFile {
        path: path.clone(),
        message,
    };
    let text = crate::read_text::read_text(&path)?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
    let mut out = Prompts::default();
    match &v["prompts"] {
        serde_json::Value::Null => {}
        serde_json::Value::Object(map) => {
            for (name, text) in map {
                let text = text
                    .as_str()
                    .ok_or_else(|| bad(format!("prompt {name:?} is not a string")))?;
                out.prompts.push((name.clone(), text.to_owned()));
            }
        }
        _ => return Err(bad("`prompts` is not an object".to_owned())),
    }
    match &v["default_prompt_name"] {
        serde_json::Value::Null => {}
        serde_json::Value::String(name) if out.prompts.iter().any(|(n, _)| n == name) => {
            out.default_name = Some(name.clone());
        }
        other => {
            return Err(bad(format!(
                "default_prompt_name {other} is not a prompt's name"
            )));
        }
    }
    Ok(out)
}

/// Writes `prompts`' keys (nothing when there are none).
pub fn add_prompts(out: &mut GgufAssembly, prompts: Prompts) {
    if prompts.prompts.is_empty() {
        return;
    }
    let (names, texts): (Vec<String>, Vec<String>) = prompts.prompts.into_iter().unzip();
    out.kv(
        "pagoda.embedding.prompt_names",
        MetaValue::Array(MetaArray::Str(names)),
    );
    out.kv(
        "pagoda.embedding.prompts",
        MetaValue::Array(MetaArray::Str(texts)),
    );
    if let Some(name) = prompts.default_name {
        out.kv(
            "pagoda.embedding.default_prompt_name",
            MetaValue::String(name),
        );
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn dir_with(name: &str, json: Option<&str>) -> std::path::PathBuf {
        let dir =
            std::env::temp_dir().join(format!("pagoda-hf-prompts-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("config_sentence_transformers.json");
        match json {
            Some(j) => std::fs::write(file, j).unwrap(),
            None => {
                let _ = std::fs::remove_file(file);
            }
        }
        dir
    }

    #[test]
    fn prompts_and_default_are_read_in_order() {
        let dir = dir_with(
            "ok",
            Some(
                r#"{"prompts": {"query": "task: search result | query: ", "document": "title: none | text: "},
                "default_prompt_name": "query"}"#,
            ),
        );
        let p = read_prompts(&dir).unwrap();
        assert_eq!(
            p.prompts,
            [
                (
                    "query".to_owned(),
                    "task: search result | query: ".to_owned()
                ),
                ("document".to_owned(), "title: none | text: ".to_owned()),
            ]
        );
        assert_eq!(p.default_name.as_deref(), Some("query"));
    }

    #[test]
    fn no_file_or_no_prompts_is_none() {
        assert_eq!(
            read_prompts(&dir_with("none", None)).unwrap(),
            Prompts::default()
        );
        let dir = dir_with(
            "empty",
            Some(r#"{"prompts": {}, "default_prompt_name": null}"#),
        );
        assert_eq!(read_prompts(&dir).unwrap(), Prompts::default());
    }

    #[test]
    fn a_default_that_names_no_prompt_is_refused() {
        let dir = dir_with(
            "bad",
            Some(r#"{"prompts": {"query": "q: "}, "default_prompt_name": "doc"}"#),
        );
        let err = read_prompts(&dir).unwrap_err().to_string();
        assert!(err.contains("doc"), "{err}");
    }
}
