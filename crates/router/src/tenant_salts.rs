//! The tenant salts the replicas put into their block hashes (their `--api-key` and
//! `--api-keys-file`): given the same key and file (`pagoda router --tenant-api-key`,
//! `--tenant-keys-file`), cache-aware routing salts a request's prompt as the replica will, so
//! a tenant's requests find the blocks its earlier ones left. The file is re-read on SIGHUP as
//! the replicas re-read theirs. The router only looks keys up; the replicas check them.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;
use pagoda_api_keys::KeysFileError;
use pagoda_api_keys::key_digest::{file_tenant_salt, key_digest, tenant_salt};

/// Salt by key digest (the keys themselves are not kept).
#[derive(Debug, Default)]
pub struct TenantSalts {
    /// `--tenant-keys-file`, read again by [`TenantSalts::reload`].
    file: Option<PathBuf>,
    /// The replicas' single `--api-key` (tenant `default`) and its salt; kept across reloads.
    single: Option<([u8; 16], String)>,
    /// Swapped whole on reload, so a request sees one file's keys or the next's.
    by_key: RwLock<Arc<HashMap<[u8; 16], String>>>,
}

impl TenantSalts {
    /// The salts of the replicas' `--api-key` and of the tenants in their keys file (read now;
    /// an unusable file is an error).
    pub fn new(api_key: Option<&str>, file: Option<PathBuf>) -> Result<Self, KeysFileError> {
        let salts = Self {
            file,
            // The replicas' rule for the one key (`server::tenants`): the key's own salt.
            single: api_key.map(|k| (key_digest(k), tenant_salt(k))),
            by_key: RwLock::default(),
        };
        salts.reload()?;
        Ok(salts)
    }

    /// Re-reads the keys file; on error the keys in use stay. The number of keys now known.
    pub fn reload(&self) -> Result<usize, KeysFileError> {
        let mut by_key: HashMap<[u8; 16], String> = self.single.iter().cloned().collect();
        if let Some(path) = &self.file {
            // A key in both wins as the file's, as on the replicas (their last match).
            by_key.extend(
                pagoda_api_keys::keys_file::read(path)?
                    .into_iter()
                    .map(|e| (key_digest(&e.key), file_tenant_salt(&e.tenant))),
            );
        }
        let n = by_key.len();
        *self.by_key.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(by_key);
        Ok(n)
    }

    /// The salt of the tenant whose key the request presents (the replicas' rule: a bearer
    /// token, else Anthropic's `x-api-key`); `None` for no key or an unknown one.
    pub fn for_request(&self, headers: &HeaderMap) -> Option<String> {
        let bearer = headers
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        let key = bearer
            .or_else(|| headers.get("x-api-key").and_then(|v| v.to_str().ok()))?
            .trim();
        let by_key = Arc::clone(&self.by_key.read().unwrap_or_else(|p| p.into_inner()));
        by_key.get(&key_digest(key)).cloned()
    }

    /// Whether there is a file to re-read.
    pub fn has_file(&self) -> bool {
        self.file.is_some()
    }
}

/// Re-reads `salts`' keys file on every SIGHUP, as the replicas re-read their `--api-keys-file`
/// (the same signal reaches both in a deployment that rotates keys); a file that does not read
/// is logged and the keys in use stay. Call inside a tokio runtime.
pub fn reload_on_sighup(salts: Arc<TenantSalts>) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut hup = signal(SignalKind::hangup())?;
        tokio::spawn(async move {
            while hup.recv().await.is_some() {
                match salts.reload() {
                    Ok(keys) => tracing::info!(keys, "--tenant-keys-file reloaded"),
                    Err(e) => {
                        tracing::error!("--tenant-keys-file not reloaded, the old keys stay: {e}")
                    }
                }
            }
        });
    }
    #[cfg(not(unix))]
    let _ = salts;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pagoda_block_hash::{ExtraKeys, root_hash};

    fn headers(k: &str, v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap_or_else(|e| panic!("{e}")),
            v.parse().unwrap_or_else(|e| panic!("{e}")),
        );
        h
    }

    #[test]
    fn a_tenants_requests_are_salted_as_the_replicas_salt_them() {
        let dir = std::env::temp_dir().join(format!("pagoda-router-keys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        let file = dir.join("keys.json");
        let keys = r#"{"keys": [{"key": "sk-a1", "tenant": "alice"}, {"key": "sk-a2", "tenant": "alice"},
                                {"key": "sk-b", "tenant": "bob"}]}"#;
        std::fs::write(&file, keys).unwrap_or_else(|e| panic!("{e}"));
        let salts =
            TenantSalts::new(Some("sk-one"), Some(file.clone())).unwrap_or_else(|e| panic!("{e}"));
        let a1 = salts.for_request(&headers("authorization", "Bearer sk-a1"));
        let a2 = salts.for_request(&headers("x-api-key", "sk-a2"));
        let b = salts.for_request(&headers("authorization", "Bearer sk-b"));
        assert_eq!(a1, a2, "one tenant, one salt");
        assert_ne!(a1, b);
        assert_eq!(a1, Some(file_tenant_salt("alice")));
        assert_eq!(
            salts.for_request(&headers("authorization", "Bearer sk-one")),
            Some(tenant_salt("sk-one")),
            "the single --api-key is salted by the key, as the replicas salt tenant `default`"
        );
        assert_eq!(
            salts.for_request(&headers("authorization", "Bearer nope")),
            None
        );
        assert_eq!(salts.for_request(&HeaderMap::new()), None);
        // A reload takes keys added and drops keys removed; the single key stays; a file that
        // does not read leaves the keys in use.
        std::fs::write(&file, r#"{"keys": [{"key": "sk-a3", "tenant": "alice"}]}"#)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(salts.reload().ok(), Some(2));
        assert_eq!(salts.for_request(&headers("x-api-key", "sk-a3")), a1);
        assert_eq!(salts.for_request(&headers("x-api-key", "sk-a1")), None);
        assert!(salts.for_request(&headers("x-api-key", "sk-one")).is_some());
        std::fs::write(&file, "not json").unwrap_or_else(|e| panic!("{e}"));
        assert!(salts.reload().is_err());
        assert_eq!(salts.for_request(&headers("x-api-key", "sk-a3")), a1);
        // The chain the router builds for alice's request with its own cache_salt is the
        // engine's: the tenant salt leads, the request's follows (`ExtraKeys::for_tenant`).
        let mut keys = ExtraKeys {
            lora_id: None,
            cache_salt: Some("mine".into()),
        };
        keys.for_tenant(&a1.unwrap_or_default());
        assert_eq!(
            keys.cache_salt,
            Some(format!("{}/mine", file_tenant_salt("alice")))
        );
        let _ = keys.chain(root_hash("0"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
