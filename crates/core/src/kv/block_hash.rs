//! Chained hashes of full KV blocks: a block's hash covers its tokens and, through its parent's
//! hash, every token before it, so equal hashes mean equal prefixes. Extra keys (LoRA adapter,
//! tenant cache salt) enter the root, so requests that differ in them never share a block.

use std::hash::{DefaultHasher, Hash, Hasher};

/// 128 bits: two independent SipHash streams. A collision would silently serve another
/// prompt's KV, so 64 bits (a birthday bound of ~4e9 blocks) is not comfortably enough.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockHash(pub u128);

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
    /// The parent hash of a request's first block.
    pub fn root(&self) -> BlockHash {
        hash_parts(|h| {
            0x7061_676f_6461u64.hash(h); // "pagoda": a fixed, non-zero root
            self.hash(h);
        })
    }
}

/// The hash of a full block of `tokens` following the block hashed `parent`.
pub fn hash_block(parent: BlockHash, tokens: &[u32]) -> BlockHash {
    hash_parts(|h| {
        parent.0.hash(h);
        tokens.hash(h);
    })
}

/// Extends `hashes` with the hashes of every full block of `tokens` not hashed yet.
pub fn extend_block_hashes(
    hashes: &mut Vec<BlockHash>,
    root: BlockHash,
    tokens: &[u32],
    block_size: usize,
) {
    while (hashes.len() + 1) * block_size <= tokens.len() {
        let i = hashes.len();
        let parent = hashes.last().copied().unwrap_or(root);
        hashes.push(hash_block(
            parent,
            &tokens[i * block_size..(i + 1) * block_size],
        ));
    }
}

fn hash_parts(feed: impl Fn(&mut DefaultHasher)) -> BlockHash {
    // DefaultHasher::new() has fixed keys: hashes are stable within a build, which is what a
    // process (and replicas of one binary, for the router) needs.
    let mut a = DefaultHasher::new();
    1u8.hash(&mut a);
    feed(&mut a);
    let mut b = DefaultHasher::new();
    2u8.hash(&mut b);
    feed(&mut b);
    BlockHash((u128::from(a.finish()) << 64) | u128::from(b.finish()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_prefixes_hash_equal_and_salts_separate() {
        let toks: Vec<u32> = (0..40).collect();
        let root = ExtraKeys::default().root();
        let mut a = Vec::new();
        extend_block_hashes(&mut a, root, &toks, 16);
        assert_eq!(a.len(), 2);
        let mut b = Vec::new();
        extend_block_hashes(&mut b, root, &toks[..35], 16);
        assert_eq!(a, b);
        let mut c = Vec::new();
        let salted = ExtraKeys {
            cache_salt: Some("tenant".into()),
            ..Default::default()
        };
        extend_block_hashes(&mut c, salted.root(), &toks, 16);
        assert!(a.iter().all(|h| !c.contains(h)));
        // A different first block changes every later hash (the chain).
        let mut other = toks.clone();
        other[0] = 99;
        let mut d = Vec::new();
        extend_block_hashes(&mut d, root, &other, 16);
        assert_ne!(a[1], d[1]);
    }
}
