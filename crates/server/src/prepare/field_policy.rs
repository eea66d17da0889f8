//! The one rule for request keys pagoda does not know, in every API. Inside messages, content
//! parts and blocks, input items and tool definitions they are ignored and noted (clients keep
//! their own bookkeeping there: litellm replays `provider_specific_fields`); at the top level
//! `--unknown-fields` decides (a 400 naming a near known name by default); inside a parameter
//! object (`response_format`, `tool_choice`, `kv_transfer_params`, ...) they are refused, since
//! such a key changes what the request asks for. Known keys keep every check of their own.

use std::str::FromStr;

use pagoda_protocol::ChatMessage;
use serde_json::{Map, Value};

use crate::observe::metrics::engine::Metrics;
use crate::prepare::validation_error::ValidationError;

/// `--unknown-fields`: what an unknown top-level parameter gets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum UnknownFields {
    /// 400 naming the key (OpenAI's own behaviour), with a near known name.
    #[default]
    Reject,
    /// Ignored, logged at warn and counted.
    Warn,
    /// Ignored, logged at debug and counted (vLLM's behaviour).
    Ignore,
}

impl FromStr for UnknownFields {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "reject" => Ok(Self::Reject),
            "warn" => Ok(Self::Warn),
            "ignore" => Ok(Self::Ignore),
            other => Err(format!(
                "unknown `{other}`: expected `reject`, `warn` or `ignore`"
            )),
        }
    }
}

/// The unknown keys one request carried and got through with, as paths
/// (`messages[1].provider_specific_fields`, or a top-level name under `warn` / `ignore`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ignored {
    /// Inside messages, parts, items and tools: always accepted.
    pub nested: Vec<String>,
    /// Top-level parameters let through by `--unknown-fields warn|ignore`.
    pub top: Vec<String>,
    /// The policy they were let through under (what `report` logs them at).
    warn: bool,
}

impl Ignored {
    /// The keys of a content object at `field` (a message, block, input item or tool) outside
    /// `known` (a `null` is as good as absent): accepted, noted.
    pub fn content_keys(&mut self, obj: &Map<String, Value>, field: &str, known: &[&str]) {
        self.nested.extend(
            obj.iter()
                .filter(|(k, v)| !v.is_null() && !known.contains(&k.as_str()))
                .map(|(k, _)| format!("{field}.{k}")),
        );
    }

    /// The keys of chat messages and their parts the chat-prompt rule leaves out.
    pub fn messages(&mut self, messages: &[ChatMessage]) {
        self.nested
            .extend(pagoda_frontend::chat_prompt::unknown_keys(messages));
    }

    /// The top-level keys of `extra` (what the request type did not read), judged by `policy`:
    /// the first one refused with the nearest of `known`, or all noted.
    pub fn top_level(
        &mut self,
        policy: UnknownFields,
        extra: &Map<String, Value>,
        known: &[&str],
    ) -> Result<(), ValidationError> {
        self.top_level_keys(policy, extra.keys().map(String::as_str), known)
    }

    /// [`Self::top_level`] over keys the endpoint has already sorted out of `extra`.
    pub fn top_level_keys<'k>(
        &mut self,
        policy: UnknownFields,
        keys: impl IntoIterator<Item = &'k str>,
        known: &[&str],
    ) -> Result<(), ValidationError> {
        for k in keys {
            if policy == UnknownFields::Reject {
                return Err(unknown(k.to_owned(), k, known));
            }
            self.warn = policy == UnknownFields::Warn;
            self.top.push(k.to_owned());
        }
        Ok(())
    }

    /// A debug line per request (a warn line for top-level keys under `warn`), with the
    /// client's User-Agent so an operator can tell which library sends them, and the counter
    /// by field.
    pub fn report(&self, metrics: &Metrics, user_agent: Option<&str>) {
        if self.nested.is_empty() && self.top.is_empty() {
            return;
        }
        let ua = user_agent.unwrap_or("-");
        if self.warn && !self.top.is_empty() {
            tracing::warn!(fields = ?self.top, user_agent = ua, "unknown parameters ignored");
        } else if !self.top.is_empty() {
            tracing::debug!(fields = ?self.top, user_agent = ua, "unknown parameters ignored");
        }
        if !self.nested.is_empty() {
            tracing::debug!(fields = ?self.nested, user_agent = ua, "unknown fields ignored");
        }
        for path in self.top.iter().chain(&self.nested) {
            metrics.count_ignored_field(&field_label(path));
        }
    }
}

/// Refuses a key of the parameter object at `field` outside `known` (a `null` is as good as
/// absent), naming the nearest known key.
pub fn parameter_keys(
    obj: &Map<String, Value>,
    field: &str,
    known: &[&str],
) -> Result<(), ValidationError> {
    match obj
        .iter()
        .find(|(k, v)| !v.is_null() && !known.contains(&k.as_str()))
    {
        Some((k, _)) => Err(unknown(format!("{field}.{k}"), k, known)),
        None => Ok(()),
    }
}

/// The refusal of the unknown `key` (at `path`), with the known name it is probably a typo of.
pub fn unknown(path: String, key: &str, known: &[&str]) -> ValidationError {
    ValidationError::UnknownField {
        field: path,
        near: nearest(key, known).map(str::to_owned),
    }
}

/// The known name within a small edit distance of `key` (`max_token`, `temprature`), if any:
/// at most 1 edit for short names, 2 from 6 characters on, never a third of the name or more.
fn nearest<'a>(key: &str, known: &[&'a str]) -> Option<&'a str> {
    let budget = if key.chars().count() >= 6 { 2 } else { 1 };
    known
        .iter()
        .map(|k| (edit_distance(key, k), *k))
        .filter(|(d, k)| *d <= budget && *d * 3 < k.len())
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// Levenshtein distance over chars, ASCII case folded.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().map(|c| c.to_ascii_lowercase()).collect();
    let b: Vec<char> = b.chars().map(|c| c.to_ascii_lowercase()).collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut row = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let replace = prev[j] + usize::from(ca != cb);
            row[j + 1] = replace.min(prev[j + 1] + 1).min(row[j] + 1);
        }
        prev = row;
    }
    prev[b.len()]
}

/// A path as a metric label: indices dropped (`messages[].provider_specific_fields`), so the
/// series are per field, not per position; long names cut.
fn field_label(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    let mut in_index = false;
    for c in path.chars() {
        match c {
            '[' => {
                in_index = true;
                out.push('[');
            }
            ']' => {
                in_index = false;
                out.push(']');
            }
            _ if in_index => {}
            _ => out.push(c),
        }
    }
    out.chars().take(96).collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    const KNOWN: &[&str] = &["temperature", "max_tokens", "top_p", "n", "stop", "seed"];

    #[test]
    fn near_misses_get_a_suggestion_and_far_ones_do_not() {
        assert_eq!(nearest("temprature", KNOWN), Some("temperature"));
        assert_eq!(nearest("max_token", KNOWN), Some("max_tokens"));
        assert_eq!(nearest("Max_Tokens", KNOWN), Some("max_tokens"));
        assert_eq!(nearest("seeds", KNOWN), Some("seed"));
        assert_eq!(nearest("sed_", KNOWN), None, "two edits of a short name");
        assert_eq!(nearest("frobnicate", KNOWN), None);
        assert_eq!(nearest("m", KNOWN), None, "never a third of the name");
        let e = unknown("temprature".into(), "temprature", KNOWN);
        assert_eq!(
            e.to_string(),
            "Unrecognized request argument supplied: temprature; did you mean `temperature`?"
        );
    }

    #[test]
    fn the_top_level_follows_the_policy() {
        let extra: Map<String, Value> = serde_json::from_value(json!({"temprature": 0.5})).unwrap();
        let mut ig = Ignored::default();
        let e = ig
            .top_level(UnknownFields::Reject, &extra, KNOWN)
            .unwrap_err();
        assert_eq!(e.field().as_deref(), Some("temprature"));
        for policy in [UnknownFields::Warn, UnknownFields::Ignore] {
            let mut ig = Ignored::default();
            ig.top_level(policy, &extra, KNOWN).unwrap();
            assert_eq!(ig.top, ["temprature"]);
        }
    }

    #[test]
    fn content_keys_are_noted_and_parameter_keys_refused() {
        let obj: Map<String, Value> = serde_json::from_value(
            json!({"type": "text", "text": "x", "cache_control": {}, "n": null}),
        )
        .unwrap();
        let mut ig = Ignored::default();
        ig.content_keys(&obj, "messages[0].content[2]", &["type", "text"]);
        assert_eq!(ig.nested, ["messages[0].content[2].cache_control"]);
        let obj: Map<String, Value> =
            serde_json::from_value(json!({"type": "x", "text": 1})).unwrap();
        let e = parameter_keys(&obj, "response_format", &["type", "texts"]).unwrap_err();
        assert_eq!(e.field().as_deref(), Some("response_format.text"));
        assert!(e.to_string().ends_with("did you mean `texts`?"), "{e}");
        assert_eq!(
            field_label("messages[12].content[3].cache_control"),
            "messages[].content[].cache_control"
        );
    }
}
