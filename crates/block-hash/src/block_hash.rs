//! Chained hashes of full KV blocks, pinned so that another program can recompute them: a
//! block's hash is SHA-256 over the canonical CBOR of (parent hash, token ids, extra keys), as
//! vLLM's `sha256_cbor` `hash_block_tokens`; the first block's parent is SHA-256 of the seed.

use std::fmt;

use sha2::{Digest, Sha256};

use crate::canonical_cbor as cbor;

/// The full 32-byte SHA-256: a collision would silently serve another prompt's KV.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct BlockHash(pub [u8; 32]);

impl std::hash::Hash for BlockHash {
    /// SHA-256 output is uniform, so 8 of its bytes are as good a map key as all 32.
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.0[..8]);
        state.write_u64(u64::from_le_bytes(b));
    }
}

impl fmt::Debug for BlockHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl BlockHash {
    /// The integer vLLM publishes in KV events for a hash (`maybe_convert_block_hash`: its last
    /// 8 bytes, big-endian): what routers and indexers key on.
    pub fn external(&self) -> u64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.0[24..]);
        u64::from_be_bytes(b)
    }
}

/// The root seed when none is configured (vLLM's `PYTHONHASHSEED`, which it reads as a string).
pub const DEFAULT_HASH_SEED: &str = "0";

/// The parent hash of every chain's first block: SHA-256 of the CBOR text string `seed`
/// (vLLM's `NONE_HASH = sha256_cbor(PYTHONHASHSEED)`).
pub fn root_hash(seed: &str) -> BlockHash {
    let mut h = Sha256::new();
    cbor::text(&mut h, seed);
    BlockHash(h.finalize().into())
}

/// Everything besides the token ids that decides whether two requests' KV may be shared.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ExtraKeys {
    /// Digest of the LoRA adapter the KV was computed with (its weights and configuration, not
    /// its name, so a changed adapter under the same name never hits old blocks); `None` for
    /// the base model.
    pub lora_id: Option<u64>,
    /// Tenant isolation: requests with different salts never share cached blocks.
    pub cache_salt: Option<String>,
}

impl ExtraKeys {
    /// Files these keys under a tenant: the tenant's salt leads, the request's own
    /// `cache_salt` (if any) follows, so tenants never share blocks whatever salts their
    /// requests name. The engine and the cache-aware router both salt through here.
    pub fn for_tenant(&mut self, tenant_salt: &str) {
        self.cache_salt = Some(match self.cache_salt.take() {
            Some(own) => format!("{tenant_salt}/{own}"),
            None => tenant_salt.to_owned(),
        });
    }

    /// The chain of a request with these keys under `root`.
    pub fn chain(&self, root: BlockHash) -> HashChain {
        HashChain {
            root,
            lora_id: self.lora_id,
            first_extra: self.encode(true),
            rest_extra: self.encode(false),
        }
    }

    /// vLLM's per-block extra keys: `None` when empty, else the tuple (adapter, then the cache
    /// salt on the first block only: the chain carries it to every later block).
    pub fn encode(&self, first_block: bool) -> Vec<u8> {
        let salt = self.cache_salt.as_deref().filter(|_| first_block);
        let len = usize::from(self.lora_id.is_some()) + usize::from(salt.is_some());
        let mut out = Vec::new();
        if len == 0 {
            out.push(cbor::NULL);
            return out;
        }
        cbor::array(&mut out, len);
        if let Some(id) = self.lora_id {
            cbor::uint(&mut out, id);
        }
        if let Some(s) = salt {
            cbor::text(&mut out, s);
        }
        out
    }
}

/// What hashing a request's blocks needs: the root and its extra keys, encoded once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HashChain {
    root: BlockHash,
    lora_id: Option<u64>,
    first_extra: Vec<u8>,
    rest_extra: Vec<u8>,
}

impl HashChain {
    /// The adapter the chain's blocks belong to (KV events name it).
    pub fn lora_id(&self) -> Option<u64> {
        self.lora_id
    }

    /// Extends `hashes` with the hashes of every full block of `tokens` not hashed yet.
    pub fn extend(&self, hashes: &mut Vec<BlockHash>, tokens: &[u32], block_size: usize) {
        while (hashes.len() + 1) * block_size <= tokens.len() {
            let i = hashes.len();
            let (parent, extra) = match hashes.last() {
                Some(p) => (*p, &self.rest_extra),
                None => (self.root, &self.first_extra),
            };
            hashes.push(hash_block(
                &parent,
                &tokens[i * block_size..(i + 1) * block_size],
                extra,
            ));
        }
    }
}

/// SHA-256 of the CBOR array `[parent (32-byte string), [token ids], extra keys]`;
/// `extra_cbor` is the extra keys already encoded (`0xf6`, null, when there are none).
pub fn hash_block(parent: &BlockHash, tokens: &[u32], extra_cbor: &[u8]) -> BlockHash {
    let mut h = Sha256::new();
    cbor::array(&mut h, 3);
    cbor::bytes(&mut h, &parent.0);
    cbor::array(&mut h, tokens.len());
    for &t in tokens {
        cbor::uint(&mut h, u64::from(t));
    }
    cbor::Sink::put(&mut h, extra_cbor);
    BlockHash(h.finalize().into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hashes(keys: &ExtraKeys, tokens: &[u32]) -> Vec<BlockHash> {
        let mut out = Vec::new();
        keys.chain(root_hash(DEFAULT_HASH_SEED))
            .extend(&mut out, tokens, 16);
        out
    }

    #[test]
    fn equal_prefixes_hash_equal_and_salts_separate() {
        let toks: Vec<u32> = (0..40).collect();
        let a = hashes(&ExtraKeys::default(), &toks);
        assert_eq!(a.len(), 2);
        assert_eq!(a, hashes(&ExtraKeys::default(), &toks[..35]));
        let salted = ExtraKeys {
            cache_salt: Some("tenant".into()),
            ..Default::default()
        };
        let c = hashes(&salted, &toks);
        assert!(a.iter().all(|h| !c.contains(h)));
        let lora = ExtraKeys {
            lora_id: Some(1),
            ..Default::default()
        };
        assert!(hashes(&lora, &toks).iter().all(|h| !a.contains(h)));
        // A different first block changes every later hash (the chain).
        let mut other = toks.clone();
        other[0] = 99;
        assert_ne!(a[1], hashes(&ExtraKeys::default(), &other)[1]);
    }

    #[test]
    fn the_seed_moves_every_hash() {
        let toks: Vec<u32> = (0..16).collect();
        let mut a = Vec::new();
        ExtraKeys::default()
            .chain(root_hash("1"))
            .extend(&mut a, &toks, 16);
        assert_ne!(a, hashes(&ExtraKeys::default(), &toks));
    }

    /// The first block is hashed over exactly these bytes (see docs/scale-out.md).
    #[test]
    fn first_block_preimage_is_the_documented_cbor() {
        let root = root_hash("0");
        // cbor2.dumps("0") == b"\x61\x30"
        assert_eq!(root.0, <[u8; 32]>::from(Sha256::digest([0x61, 0x30])));
        let mut pre = vec![0x83, 0x58, 0x20];
        pre.extend_from_slice(&root.0);
        pre.extend_from_slice(&[0x83, 0x01, 0x18, 0x64, 0x19, 0x03, 0xe8, 0xf6]);
        assert_eq!(
            hash_block(&root, &[1, 100, 1000], &[cbor::NULL]).0,
            <[u8; 32]>::from(Sha256::digest(&pre))
        );
    }
}
