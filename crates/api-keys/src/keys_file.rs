//! The `--api-keys-file` format: a JSON object with one entry per key naming its tenant and,
//! optionally, the tenant's limits and scheduling weight. Read whole and checked whole, so a bad
//! file (at start-up or on SIGHUP) changes nothing.
//!
//! ```json
//! {"keys": [
//!   {"key": "sk-alice-1", "tenant": "alice", "max_requests_per_minute": 60,
//!    "max_tokens_per_minute": 20000, "max_concurrent_requests": 4, "priority": 2},
//!   {"key": "sk-bob", "tenant": "bob"},
//!   {"key": "sk-ops", "tenant": "ops", "scopes": ["admin"]}
//! ]}
//! ```
//!
//! `scopes` (`scopes.rs`) says what the key may do; without it, `inference`.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use serde::Deserialize;

use crate::scopes::{SCOPE_NAMES, Scopes};

/// The largest keys file read.
pub const MAX_FILE_BYTES: u64 = 16 << 20;

/// What a tenant may do; `None` is unlimited.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    pub max_requests_per_minute: Option<u32>,
    /// Prompt tokens when a request is admitted plus generated tokens as they come.
    pub max_tokens_per_minute: Option<u64>,
    pub max_concurrent_requests: Option<u32>,
    /// Weight under `--scheduling-policy fair` (a tenant of 2 gets twice the tokens of 1).
    pub priority: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    key: String,
    tenant: String,
    max_requests_per_minute: Option<u32>,
    max_tokens_per_minute: Option<u64>,
    max_concurrent_requests: Option<u32>,
    priority: Option<u32>,
    scopes: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    keys: Vec<Entry>,
}

/// A key file that cannot be used; the message names the entry.
#[derive(Debug, thiserror::Error)]
pub enum KeysFileError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} is not a valid keys file: {source}")]
    Parse {
        path: String,
        source: serde_json::Error,
    },
    #[error("entry {index}: {problem}")]
    Entry { index: usize, problem: String },
}

/// One key and the tenant it belongs to.
pub struct KeyEntry {
    pub key: String,
    pub tenant: String,
    pub limits: Limits,
    pub scopes: Scopes,
}

/// Reads and checks the file: non-empty unique keys, tenant names usable as metric labels,
/// positive limits, and one set of limits per tenant (its keys must agree).
pub fn read(path: &Path) -> Result<Vec<KeyEntry>, KeysFileError> {
    let shown = path.display().to_string();
    let io = |source| KeysFileError::Read {
        path: shown.clone(),
        source,
    };
    // Checked before reading: a keys file is small (16 MiB holds ~100,000 keys).
    let len = std::fs::metadata(path).map_err(io)?.len();
    if len > MAX_FILE_BYTES {
        return Err(io(std::io::Error::other(format!(
            "{len} bytes, over the {MAX_FILE_BYTES}-byte limit of a keys file"
        ))));
    }
    let text = std::fs::read_to_string(path).map_err(io)?;
    parse(&text).map_err(|e| match e {
        KeysFileError::Parse { source, .. } => KeysFileError::Parse {
            path: shown,
            source,
        },
        e => e,
    })
}

pub fn parse(text: &str) -> Result<Vec<KeyEntry>, KeysFileError> {
    let file: File = serde_json::from_str(text).map_err(|source| KeysFileError::Parse {
        path: String::new(),
        source,
    })?;
    let mut seen = HashSet::new();
    let mut by_tenant: HashMap<String, Limits> = HashMap::new();
    let mut out = Vec::with_capacity(file.keys.len());
    for (index, e) in file.keys.into_iter().enumerate() {
        let bad = |problem: String| KeysFileError::Entry { index, problem };
        if e.key.trim().is_empty() || e.key.trim() != e.key {
            return Err(bad(
                "`key` must be non-empty, without surrounding spaces".into()
            ));
        }
        if !seen.insert(e.key.clone()) {
            return Err(bad("the same `key` appears twice".into()));
        }
        let name_ok = !e.tenant.is_empty()
            && e.tenant.len() <= 64
            && e.tenant
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
        if !name_ok {
            return Err(bad(format!(
                "`tenant` {:?} must be 1-64 characters of A-Z, a-z, 0-9, `-`, `_`, `.`",
                e.tenant
            )));
        }
        let l = Limits {
            max_requests_per_minute: e.max_requests_per_minute,
            max_tokens_per_minute: e.max_tokens_per_minute,
            max_concurrent_requests: e.max_concurrent_requests,
            priority: e.priority,
        };
        let zero = [
            (
                "max_requests_per_minute",
                l.max_requests_per_minute.map(u64::from),
            ),
            ("max_tokens_per_minute", l.max_tokens_per_minute),
            (
                "max_concurrent_requests",
                l.max_concurrent_requests.map(u64::from),
            ),
            ("priority", l.priority.map(u64::from)),
        ]
        .into_iter()
        .find(|(_, v)| *v == Some(0));
        if let Some((field, _)) = zero {
            return Err(bad(format!("`{field}` must be at least 1")));
        }
        match by_tenant.get(&e.tenant) {
            Some(prev) if *prev != l => {
                return Err(bad(format!(
                    "tenant `{}` has other limits in an earlier entry; its keys must agree",
                    e.tenant
                )));
            }
            Some(_) => {}
            None => {
                by_tenant.insert(e.tenant.clone(), l);
            }
        }
        let scopes = match &e.scopes {
            None => Scopes::INFERENCE,
            Some(names) if names.is_empty() => {
                return Err(bad("`scopes` must name at least one scope".into()));
            }
            Some(names) => Scopes::parse(names).map_err(|n| {
                bad(format!(
                    "`scopes` has {n:?}; the scopes are {}",
                    SCOPE_NAMES.join(", ")
                ))
            })?,
        };
        out.push(KeyEntry {
            key: e.key,
            tenant: e.tenant,
            limits: l,
            scopes,
        });
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn reads_entries_with_and_without_limits() {
        let got = parse(
            r#"{"keys": [
                {"key": "k1", "tenant": "alice", "max_requests_per_minute": 3, "priority": 2},
                {"key": "k2", "tenant": "alice", "max_requests_per_minute": 3, "priority": 2},
                {"key": "k3", "tenant": "bob"}
            ]}"#,
        )
        .unwrap();
        assert_eq!(got.len(), 3);
        assert_eq!(got[0].limits.max_requests_per_minute, Some(3));
        assert_eq!(got[2].limits, Limits::default());
        assert_eq!(got[2].scopes, Scopes::INFERENCE);
    }

    #[test]
    fn refuses_what_cannot_work() {
        for (text, want) in [
            (r#"{"keys": [{"key": "", "tenant": "a"}]}"#, "non-empty"),
            (
                r#"{"keys": [{"key": "k", "tenant": "a b"}]}"#,
                "must be 1-64",
            ),
            (
                r#"{"keys": [{"key": "k", "tenant": "a"}, {"key": "k", "tenant": "b"}]}"#,
                "twice",
            ),
            (
                r#"{"keys": [{"key": "k", "tenant": "a", "max_concurrent_requests": 0}]}"#,
                "at least 1",
            ),
            (
                r#"{"keys": [{"key": "k", "tenant": "a"}, {"key": "j", "tenant": "a", "priority": 2}]}"#,
                "must agree",
            ),
            (
                r#"{"keys": [{"key": "k", "tenant": "a", "rpm": 2}]}"#,
                "unknown field",
            ),
            (
                r#"{"keys": [{"key": "k", "tenant": "a", "scopes": ["root"]}]}"#,
                "the scopes are inference, admin",
            ),
            (
                r#"{"keys": [{"key": "k", "tenant": "a", "scopes": []}]}"#,
                "at least one scope",
            ),
        ] {
            let err = parse(text).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(err.contains(want), "{text}: {err}");
        }
    }
}
