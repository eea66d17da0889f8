//! The executor's half of a lower KV tier: where an evicted block's bytes go and where a
//! finished read's bytes come from. The disk tier saves and reads files; the transfer store
//! (prefill/decode disaggregation) takes no saves and hands over received blocks.

use pagoda_core::kv::{BlockHash, LoadTicket};

/// Block bytes in and out of a lower tier, called by `ModelRunner` on the engine thread.
pub trait TierBytes: Send + Sync {
    /// Queues an evicted block's bytes; never waits.
    fn save(&self, key: BlockHash, payload: Vec<u8>);
    /// Queues a block, waiting for room (shutdown's flush).
    fn save_blocking(&self, key: BlockHash, payload: Vec<u8>);
    /// The blocks read for `ticket`, forgetting it.
    fn take_read(&self, ticket: LoadTicket) -> Vec<(BlockHash, Vec<u8>)>;
}

impl TierBytes for crate::DiskTier {
    fn save(&self, key: BlockHash, payload: Vec<u8>) {
        Self::save(self, key, payload);
    }

    fn save_blocking(&self, key: BlockHash, payload: Vec<u8>) {
        Self::save_blocking(self, key, payload);
    }

    fn take_read(&self, ticket: LoadTicket) -> Vec<(BlockHash, Vec<u8>)> {
        Self::take_read(self, ticket)
    }
}

impl TierBytes for crate::kv::transfer::TransferStore {
    fn save(&self, _key: BlockHash, _payload: Vec<u8>) {}

    fn save_blocking(&self, _key: BlockHash, _payload: Vec<u8>) {}

    fn take_read(&self, ticket: LoadTicket) -> Vec<(BlockHash, Vec<u8>)> {
        Self::take_read(self, ticket)
    }
}
