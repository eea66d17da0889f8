//! Tenants: who holds each API key (`--api-key`, `--api-keys-file`), their limits, prefix-cache
//! salts, scheduling weights and counters. Keys are kept only as keyed digests and compared in
//! constant time; the table is swapped whole on reload (SIGHUP), while each tenant's state,
//! engine id and counters live on by name.

pub mod tenant;

// The keys file, scopes and key digests are shared with the router (`pagoda-api-keys`).
pub use pagoda_api_keys::{key_digest, keys_file, scopes};

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher, RandomState};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, RwLock};

use pagoda_exposition::{Exposition, Scraped};

pub use keys_file::{KeysFileError, Limits};
pub use scopes::Scopes;
pub use tenant::{OverLimit, TenantPermit, TenantState};

/// A key's digest: 128 bits of SipHash under a per-process random key.
type Digest = [u8; 16];

/// The tenant of the one `--api-key`.
pub const DEFAULT_TENANT: &str = "default";

struct Table {
    entries: Vec<(Digest, Arc<TenantState>, Scopes)>,
}

/// Every key the server accepts, and every tenant it has known since start.
pub struct Tenants {
    file: Option<PathBuf>,
    hasher: RandomState,
    /// The `--api-key` digest, kept across reloads of the file.
    single: Option<Digest>,
    table: RwLock<Arc<Table>>,
    by_name: Mutex<HashMap<String, Arc<TenantState>>>,
}

/// What a reload found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reloaded {
    pub keys: usize,
    pub tenants: usize,
}

impl Tenants {
    /// Tenants from `--api-key` and `--api-keys-file` (read now; an unusable file is an error).
    pub fn new(api_key: Option<&str>, file: Option<PathBuf>) -> Result<Self, KeysFileError> {
        let t = Self::without_file(api_key, file);
        t.reload()?;
        Ok(t)
    }

    /// The `--api-key` tenant alone; the keys file (if any) is read by the next reload.
    pub fn without_file(api_key: Option<&str>, file: Option<PathBuf>) -> Self {
        let hasher = RandomState::new();
        let single = api_key.map(|k| digest(&hasher, k));
        let t = Self {
            file,
            hasher,
            single,
            table: RwLock::new(Arc::new(Table {
                entries: Vec::new(),
            })),
            by_name: Mutex::new(HashMap::new()),
        };
        if let Some(key) = api_key {
            let state = t.tenant(
                DEFAULT_TENANT,
                key_digest::tenant_salt(key),
                Limits::default(),
            );
            t.swap(vec![(digest(&t.hasher, key), state, Scopes::ALL)]);
        }
        t
    }

    /// Whether requests need a key.
    pub fn required(&self) -> bool {
        self.single.is_some() || self.file.is_some()
    }

    /// Re-reads the keys file (keys added and removed take effect for the next request); on
    /// error the table in use stays as it was.
    pub fn reload(&self) -> Result<Reloaded, KeysFileError> {
        let mut entries = Vec::new();
        if let Some(d) = self.single {
            let current = self.current();
            entries.extend(current.entries.iter().filter(|(e, _, _)| *e == d).cloned());
        }
        if let Some(path) = &self.file {
            for e in keys_file::read(path)? {
                let salt = key_digest::file_tenant_salt(&e.tenant);
                let state = self.tenant(&e.tenant, salt, e.limits);
                state.set_limits(e.limits);
                entries.push((digest(&self.hasher, &e.key), state, e.scopes));
            }
        }
        let keys = entries.len();
        let mut names: Vec<&str> = entries.iter().map(|(_, s, _)| s.name.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        let tenants = names.len();
        self.swap(entries);
        Ok(Reloaded { keys, tenants })
    }

    /// The tenant holding `key`. Every entry is compared, in constant time each, so the time
    /// taken says nothing about which key (or how much of one) matched.
    pub fn resolve(&self, key: &str) -> Option<Arc<TenantState>> {
        self.resolve_with_scopes(key).map(|(t, _)| t)
    }

    /// The tenant holding `key` and what the key may do.
    pub fn resolve_with_scopes(&self, key: &str) -> Option<(Arc<TenantState>, Scopes)> {
        let d = digest(&self.hasher, key);
        let table = self.current();
        let mut found = None;
        for (e, state, scopes) in &table.entries {
            if key_digest::constant_time_eq(e, &d) {
                found = Some((Arc::clone(state), *scopes));
            }
        }
        found
    }

    /// Per-tenant counters and gauges, labelled by tenant name.
    pub fn render_metrics(&self, e: &mut Exposition) {
        let by_name = self.by_name.lock().unwrap_or_else(|p| p.into_inner());
        if by_name.is_empty() {
            return;
        }
        let mut tenants: Vec<&Arc<TenantState>> = by_name.values().collect();
        tenants.sort_by(|a, b| a.name.cmp(&b.name));
        let per_tenant = |value: &dyn Fn(&TenantState) -> u64| {
            tenants
                .iter()
                .map(|t| (vec![("tenant", t.name.clone())], value(t).into()))
                .collect::<Vec<_>>()
        };
        type Read = fn(&TenantState) -> u64;
        let counters: [(&str, &str, Read); 3] = [
            (
                "pagoda:tenant_requests_total",
                "Requests admitted, per tenant.",
                |t| t.requests_total.load(Ordering::Relaxed),
            ),
            (
                "pagoda:tenant_prompt_tokens_total",
                "Prompt tokens of admitted requests, per tenant.",
                |t| t.prompt_tokens_total.load(Ordering::Relaxed),
            ),
            (
                "pagoda:tenant_generation_tokens_total",
                "Generated tokens, per tenant.",
                |t| t.generation_tokens_total.load(Ordering::Relaxed),
            ),
        ];
        for (name, help, value) in counters {
            e.scraped(name, help, Scraped::counters(per_tenant(&value)));
        }
        e.scraped(
            "pagoda:tenant_requests_running",
            "Requests running or waiting, per tenant.",
            Scraped::gauges(per_tenant(&|t| u64::from(t.running()))),
        );
        let limited = tenants.iter().flat_map(|t| {
            tenant::LIMIT_NAMES.iter().enumerate().map(|(i, limit)| {
                let labels = vec![("tenant", t.name.clone()), ("limit", (*limit).to_owned())];
                (labels, t.rejected_total[i].load(Ordering::Relaxed).into())
            })
        });
        e.scraped(
            "pagoda:tenant_rate_limited_total",
            "Requests refused with 429, per tenant and limit.",
            Scraped::counters(limited),
        );
    }

    /// The tenant called `name`, made on first sight with the next engine id (0 is "none").
    fn tenant(&self, name: &str, salt: String, limits: Limits) -> Arc<TenantState> {
        let mut by_name = self.by_name.lock().unwrap_or_else(|p| p.into_inner());
        let next_id = by_name.len() as u32 + 1;
        Arc::clone(
            by_name.entry(name.to_owned()).or_insert_with(|| {
                Arc::new(TenantState::new(name.to_owned(), next_id, salt, limits))
            }),
        )
    }

    fn current(&self) -> Arc<Table> {
        Arc::clone(&self.table.read().unwrap_or_else(|p| p.into_inner()))
    }

    fn swap(&self, entries: Vec<(Digest, Arc<TenantState>, Scopes)>) {
        *self.table.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(Table { entries });
    }
}

fn digest(hasher: &RandomState, key: &str) -> Digest {
    let mut out = [0u8; 16];
    for (i, half) in out.chunks_mut(8).enumerate() {
        let mut h = hasher.build_hasher();
        h.write_u8(i as u8);
        h.write(key.as_bytes());
        half.copy_from_slice(&h.finish().to_le_bytes());
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn keys_resolve_to_their_tenant_and_reload_swaps_them() {
        let dir = std::env::temp_dir().join(format!("pagoda-keys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("keys.json");
        std::fs::write(
            &path,
            r#"{"keys": [{"key": "ka", "tenant": "alice"}, {"key": "kb", "tenant": "bob"}]}"#,
        )
        .unwrap();
        let t = Tenants::new(Some("single"), Some(path.clone())).unwrap();
        assert_eq!(t.resolve("ka").unwrap().name, "alice");
        assert_eq!(t.resolve("single").unwrap().name, DEFAULT_TENANT);
        assert!(t.resolve("kc").is_none() && t.resolve("k").is_none());
        let alice = t.resolve("ka").unwrap();
        std::fs::write(&path, r#"{"keys": [{"key": "kc", "tenant": "alice"}]}"#).unwrap();
        assert_eq!(
            t.reload().unwrap(),
            Reloaded {
                keys: 2,
                tenants: 2
            }
        );
        assert!(t.resolve("ka").is_none() && t.resolve("kb").is_none());
        let again = t.resolve("kc").unwrap();
        assert!(
            Arc::ptr_eq(&alice, &again),
            "a tenant keeps its state across reloads"
        );
        assert_ne!(alice.salt, t.resolve("single").unwrap().salt);
        std::fs::write(&path, "not json").unwrap();
        assert!(t.reload().is_err());
        assert!(
            t.resolve("kc").is_some(),
            "a bad file leaves the table as it was"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
