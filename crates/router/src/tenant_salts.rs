//! The tenant salts the replicas put into their block hashes (`--api-keys-file`): with the
//! same file (`pagoda router --tenant-keys-file`), cache-aware routing salts a request's prompt
//! as the replica will, so a tenant's requests find the blocks its earlier ones left. The
//! router only looks keys up; the replicas check them.

use std::collections::HashMap;
use std::path::Path;

use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;
use pagoda_api_keys::KeysFileError;
use pagoda_api_keys::key_digest::{file_tenant_salt, key_digest};

/// Salt by key digest (the keys themselves are not kept).
#[derive(Debug, Default)]
pub struct TenantSalts {
    by_key: HashMap<[u8; 16], String>,
}

impl TenantSalts {
    /// The salts of the tenants in a keys file.
    pub fn read(path: &Path) -> Result<Self, KeysFileError> {
        let by_key = pagoda_api_keys::keys_file::read(path)?
            .into_iter()
            .map(|e| (key_digest(&e.key), file_tenant_salt(&e.tenant)))
            .collect();
        Ok(Self { by_key })
    }

    /// The salt of the tenant whose key the request presents (the replicas' rule: a bearer
    /// token, else Anthropic's `x-api-key`); `None` for no key or an unknown one.
    pub fn for_request(&self, headers: &HeaderMap) -> Option<&str> {
        let bearer = headers
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        let key = bearer
            .or_else(|| headers.get("x-api-key").and_then(|v| v.to_str().ok()))?
            .trim();
        self.by_key.get(&key_digest(key)).map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pagoda_block_hash::{ExtraKeys, root_hash};

    #[test]
    fn a_tenants_requests_are_salted_as_the_replicas_salt_them() {
        let dir = std::env::temp_dir().join(format!("pagoda-router-keys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        let file = dir.join("keys.json");
        let keys = r#"{"keys": [{"key": "sk-a1", "tenant": "alice"}, {"key": "sk-a2", "tenant": "alice"},
                                {"key": "sk-b", "tenant": "bob"}]}"#;
        std::fs::write(&file, keys).unwrap_or_else(|e| panic!("{e}"));
        let salts = TenantSalts::read(&file).unwrap_or_else(|e| panic!("{e}"));
        let headers = |k: &str, v: &str| {
            let mut h = HeaderMap::new();
            h.insert(
                axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap_or_else(|e| panic!("{e}")),
                v.parse().unwrap_or_else(|e| panic!("{e}")),
            );
            h
        };
        let a1 = salts.for_request(&headers("authorization", "Bearer sk-a1"));
        let a2 = salts.for_request(&headers("x-api-key", "sk-a2"));
        let b = salts.for_request(&headers("authorization", "Bearer sk-b"));
        assert_eq!(a1, a2, "one tenant, one salt");
        assert_ne!(a1, b);
        assert_eq!(a1.map(str::to_owned), Some(file_tenant_salt("alice")));
        assert_eq!(
            salts.for_request(&headers("authorization", "Bearer nope")),
            None
        );
        assert_eq!(salts.for_request(&HeaderMap::new()), None);
        // The chain the router builds for alice's request with its own cache_salt is the
        // engine's: the tenant salt leads, the request's follows (`ExtraKeys::for_tenant`).
        let mut keys = ExtraKeys {
            lora_id: None,
            cache_salt: Some("mine".into()),
        };
        keys.for_tenant(a1.unwrap_or_default());
        assert_eq!(
            keys.cache_salt,
            Some(format!("{}/mine", file_tenant_salt("alice")))
        );
        let _ = keys.chain(root_hash("0"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
