//! What cache-aware routing knows about a request: its prompt tokens and the extra keys its
//! blocks are hashed with, from which the chained block hashes are computed for a replica's
//! block size exactly as the replica computes them (`pagoda-block-hash`).

use pagoda_block_hash::{BlockHash, ExtraKeys, HashChain};

/// A request's prompt, when the router could tokenize it.
#[derive(Debug, Default)]
pub struct RoutingKey {
    tokens: Option<Vec<u32>>,
    chain: Option<HashChain>,
}

impl RoutingKey {
    /// No prompt: routed by load.
    pub fn none() -> Self {
        Self::default()
    }

    /// `tokens` hashed from `root` with the request's adapter digest (a replica's
    /// `pagoda:lora_adapter_info`), its tenant's salt and its `cache_salt`, as the engine
    /// hashes them.
    pub fn new(
        tokens: Vec<u32>,
        root: BlockHash,
        lora_id: Option<u64>,
        tenant_salt: Option<&str>,
        cache_salt: Option<String>,
    ) -> Self {
        let mut keys = ExtraKeys {
            lora_id,
            cache_salt,
        };
        if let Some(t) = tenant_salt {
            keys.for_tenant(t);
        }
        Self {
            tokens: Some(tokens),
            chain: Some(keys.chain(root)),
        }
    }

    /// The prompt's length in tokens, when it was tokenized.
    pub fn num_tokens(&self) -> Option<usize> {
        self.tokens.as_ref().map(Vec::len)
    }

    /// Whether there is a prompt to hash.
    pub fn is_some(&self) -> bool {
        self.tokens.is_some()
    }

    /// The full blocks' hashes in vLLM's external 64-bit form (what KV events carry).
    pub fn hashes(&self, block_size: usize) -> Vec<u64> {
        let (Some(tokens), Some(chain)) = (&self.tokens, &self.chain) else {
            return Vec::new();
        };
        let mut out = Vec::with_capacity(tokens.len() / block_size.max(1));
        chain.extend(&mut out, tokens, block_size.max(1));
        out.iter().map(BlockHash::external).collect()
    }
}
