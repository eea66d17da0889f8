//! Context shift (llama.cpp's `--context-shift`, StreamingLLM's attention sinks): a sequence that
//! fills `max_model_len` keeps its first `keep` tokens (rounded up to whole blocks) and drops
//! about half of the rest, in whole blocks, so block tables only lose entries; the blocks after
//! the gap move to fresh blocks whose keys the executor re-rotates (`ContextShift`).

use super::output::ContextShift;
use super::scheduler::Scheduler;
use crate::request::{Request, SeqId};

impl Scheduler {
    /// `(kept blocks, discarded blocks)` for `req`, or `None` when nothing can go: the computed
    /// blocks past the kept ones are fewer than two, so there is no half to discard.
    pub(super) fn shift_plan(
        req: &Request,
        keep: usize,
        block_size: usize,
    ) -> Option<(usize, usize)> {
        let keep_blocks = keep.div_ceil(block_size);
        let full = req.num_computed_tokens / block_size;
        let discard = full.saturating_sub(keep_blocks) / 2;
        (discard > 0).then_some((keep_blocks, discard))
    }

    /// Shifts `seq` (which `update_from_output` marked): its tokens, and its blocks with the
    /// KV copies the executor makes before this step's forward pass. Returns false when the
    /// pool had no blocks to copy into: the sequence was preempted instead and is recomputed
    /// at its new positions.
    pub(super) fn shift(&mut self, seq: SeqId) -> bool {
        let block_size = self.kv().block_size();
        let keep = self.config().context_shift_keep.unwrap_or(0);
        let Some(req) = self.requests.get_mut(&seq) else {
            return true;
        };
        req.needs_shift = false;
        let Some((keep_blocks, discard_blocks)) = Self::shift_plan(req, keep, block_size) else {
            return true; // update_from_output checked; nothing to do
        };
        let copies = self.kv.shift(seq, keep_blocks, discard_blocks);
        let (keep, discard) = (keep_blocks * block_size, discard_blocks * block_size);
        if let Some(req) = self.requests.get_mut(&seq) {
            req.discard(keep, discard, block_size);
        }
        let ok = copies.is_some();
        let copies = copies.unwrap_or_default();
        self.pending_shifts.insert(
            seq,
            ContextShift {
                keep,
                discard,
                copies,
            },
        );
        if !ok {
            self.preempt(seq);
        }
        self.counters.context_shifts += 1;
        ok
    }
}
