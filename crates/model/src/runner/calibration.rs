//! Start-up timing of forward passes (`time_steps`): the engine's cost model for speculative
//! decoding and the draft model's per-token cost both come from these measurements.

use crate::runner::batch::{Logits, SeqChunk};
use crate::{CpuExecutor, ForwardBatch};

/// Batch sizes timed at start-up: the flat part of the curve and where it bends.
pub(crate) const CALIBRATION_TOKENS: &[usize] = &[1, 2, 4, 8, 16, 32, 64];

/// Seconds of one forward of each size in `sizes`, as one chunk at the start of the arena
/// (before any request holds a block: the KV written there is overwritten before it is read),
/// with logits for every row as a verification step has them (the LM head of a 152k vocabulary
/// is a seventh of a 1.5B model's work per row). The quickest of three runs each, after a warm-up.
pub(crate) fn time_steps(exec: &mut CpuExecutor, sizes: &[usize]) -> Vec<(usize, f64)> {
    let bs = exec.kv_cache.block_size();
    let blocks = exec.kv_cache.num_blocks();
    let mut out = Vec::new();
    for (i, &n) in std::iter::once(&1).chain(sizes).enumerate() {
        if n.div_ceil(bs) > blocks {
            break;
        }
        let tokens = vec![0u32; n];
        // Every group may use the same blocks: what is written there is never read.
        let table: Vec<u32> = (0..n.div_ceil(bs) as u32).collect();
        let tables = vec![table; exec.kv_cache.plan().num_groups()];
        let chunk = SeqChunk {
            tokens: &tokens,
            start: 0,
            block_tables: &tables,
            logits: Logits::All,
        };
        let batch = ForwardBatch::from_seqs(&[chunk], bs);
        let mut best = f64::INFINITY;
        for _ in 0..3 {
            let t = std::time::Instant::now();
            if exec.forward(&batch).is_err() {
                return out;
            }
            best = best.min(t.elapsed().as_secs_f64());
        }
        if i > 0 {
            out.push((n, best));
        }
    }
    out
}
