//! Prefill/decode disaggregation as the engine core sees it: a request's `KvTransfer` says
//! whether its prompt's blocks leave for a decode replica once computed (`Send`) or arrive
//! from a prefill replica before it runs (`Receive`). The core only holds and names blocks;
//! the bytes move in `pagoda-model` (`kv/transfer/`), over TCP.

use super::block_hash::BlockHash;
use super::block_pool::BlockId;

/// A replica's part in prefill/decode disaggregation (`pagoda serve --kv-role`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KvRole {
    /// Computes prompts and ships their KV to decode replicas.
    Prefill,
    /// Receives prompts' KV (on `--kv-transfer-port`) and generates.
    Decode,
    /// An ordinary replica: no transfers.
    #[default]
    Both,
}

impl KvRole {
    /// `prefill`, `decode` or `both`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "prefill" => Some(Self::Prefill),
            "decode" => Some(Self::Decode),
            "both" => Some(Self::Both),
            _ => None,
        }
    }

    /// The flag's spelling.
    pub fn name(self) -> &'static str {
        match self {
            Self::Prefill => "prefill",
            Self::Decode => "decode",
            Self::Both => "both",
        }
    }
}

/// What a request does with its prompt's KV across replicas (its `kv_transfer_params`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KvTransfer {
    /// Prefill side: when the request ends normally, ship its prompt's full blocks to the
    /// decode replica's transfer endpoint `addr` (`host:port`) under transfer `id`.
    Send { id: String, addr: String },
    /// Decode side: the prompt's blocks come under transfer `id`; wait for them (up to the
    /// store's timeout) before computing the prompt, then import what arrived.
    Receive { id: String },
}

/// Blocks a finished prefill-role request ships, held by the scheduler until the executor has
/// copied their bytes out (the step they are named in), then released.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvSend {
    pub id: String,
    pub addr: String,
    /// `(block, group key)` of every full prompt block in every KV group, block-major.
    pub blocks: Vec<(BlockId, BlockHash)>,
}
