//! A waiting sequence and the lower KV tier: when its prefix misses in memory but its next
//! blocks are on disk (and reading them beats recomputing them), the scheduler starts a read
//! on the tier's thread and skips the sequence (status unchanged, it keeps its queue place)
//! until the read is done; then the blocks are installed as cached blocks and the sequence is
//! admitted with the longer hit. Other sequences are scheduled meanwhile.

use super::output::SchedulerOutput;
use super::scheduler::Scheduler;
use crate::kv::{ComputedBlocks, KvTransfer, PendingLoad};
use crate::request::SeqId;

impl Scheduler {
    /// Looks past `computed` (the memory hit of waiting `seq`) in the lower tier; installs a
    /// finished read's blocks (their writes go in `out.kv_loads`). Returns the hit to admit the
    /// sequence with, or `None` while its blocks are being read (skip it this step).
    pub(super) fn through_tier(
        &mut self,
        seq: SeqId,
        computed: ComputedBlocks,
        out: &mut SchedulerOutput,
    ) -> Option<ComputedBlocks> {
        let Some(tier) = self.kv.tier().cloned() else {
            return Some(computed);
        };
        let Some(req) = self.requests.get(&seq) else {
            return Some(computed);
        };
        if let Some(load) = req.loading.clone() {
            let read = tier.poll(load.ticket)?; // not read yet: wait
            let loads = self.kv.install(req, &load, read);
            if loads.is_empty() {
                tier.cancel(load.ticket);
            }
            out.kv_loads.extend(loads);
            let computed = self.kv.get_computed_blocks(req);
            if let Some(r) = self.requests.get_mut(&seq) {
                r.loading = None;
            }
            return Some(computed);
        }
        if req.tier_checked {
            return Some(computed);
        }
        // A decode-role request waits for its prompt's blocks from the prefill replica (or
        // until the transfer fails or times out: then it computes the prompt itself).
        if let Some(KvTransfer::Receive { id }) = &req.params.kv_transfer {
            let waiting = tier.awaiting(id);
            if let Some(r) = self.requests.get_mut(&seq) {
                r.awaiting_transfer = waiting;
            }
            if waiting {
                return None;
            }
        }
        let Some(req) = self.requests.get(&seq) else {
            return Some(computed);
        };
        let hit = computed.num_blocks();
        let (n, keys, looked) = self.kv.tier_hit(req, hit);
        let bs = self.kv.block_size();
        let worth = n > 0 && tier.worth_reading(keys.len(), n * bs);
        let found = if worth { n } else { 0 };
        tier.record_lookup(found, looked - found);
        let Some(r) = self.requests.get_mut(&seq) else {
            return Some(computed);
        };
        r.tier_checked = true;
        if !worth {
            return Some(computed);
        }
        r.loading = Some(PendingLoad {
            ticket: tier.prefetch(keys),
            first_block: hit,
            num_blocks: n,
        });
        None
    }

    /// Sequences waiting for a prefill replica's transfer.
    pub fn num_awaiting_transfer(&self) -> usize {
        self.requests
            .values()
            .filter(|r| r.awaiting_transfer)
            .count()
    }

    /// Sequences waiting for a tier read.
    pub fn num_loading(&self) -> usize {
        self.requests
            .values()
            .filter(|r| r.loading.is_some())
            .count()
    }
}
