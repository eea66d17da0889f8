//! What the server keeps of an API key: a fixed keyed digest (for the `/metrics` key and each
//! tenant's prefix-cache salt) and a comparison whose time does not reveal where keys differ.

use std::hash::{BuildHasher, Hasher};

/// Equality whose time depends only on the lengths, not on where the bytes differ.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = a.len() ^ b.len();
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= usize::from(x ^ y);
    }
    diff == 0
}

/// A fixed 128-bit digest of `key` (SipHash under fixed seeds): what the salt and the
/// `/metrics` key check keep instead of the key.
pub fn key_digest(key: &str) -> [u8; 16] {
    let state =
        std::hash::BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default();
    let mut out = [0u8; 16];
    for (seed, half) in [&b"pagoda-tenant-1"[..], b"pagoda-tenant-2"]
        .iter()
        .zip(out.chunks_mut(8))
    {
        let mut h = state.build_hasher();
        h.write(seed);
        h.write(key.as_bytes());
        half.copy_from_slice(&h.finish().to_be_bytes());
    }
    out
}

/// The prefix-cache salt of a `--api-keys-file` tenant: of its name, so all its keys share its
/// cached blocks.
pub fn file_tenant_salt(tenant: &str) -> String {
    tenant_salt(&format!("tenant\u{0}{tenant}"))
}

/// The prefix-cache salt of the tenant holding `key`: a keyed digest, so the key itself never
/// travels with requests into the engine.
pub fn tenant_salt(key: &str) -> String {
    let hex: String = key_digest(key).iter().map(|b| format!("{b:02x}")).collect();
    format!("tenant:{hex}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_time_eq_is_equality() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
        assert!(!constant_time_eq(b"", b"x"));
        assert!(constant_time_eq(b"", b""));
    }

    #[test]
    fn salts_differ_by_key_and_are_stable() {
        assert_eq!(tenant_salt("a"), tenant_salt("a"));
        assert_ne!(tenant_salt("a"), tenant_salt("b"));
        assert!(!tenant_salt("secret-key").contains("secret"));
    }
}
