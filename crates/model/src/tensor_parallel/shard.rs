//! Which part of the model a tensor-parallel rank holds: its query heads and the KV heads
//! they read (replicated when the ranks outnumber the KV heads), its slice of the FFN's
//! intermediate size (whole quant blocks of `ffn_down`'s rows, as even as blocks allow), and
//! its rows of the vocabulary for the LM head. The rules that refuse a layout live here.

use std::ops::Range;

use super::TpError;
use crate::config::ModelConfig;

/// One rank's part of the model. With one rank, every range is whole.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shard {
    pub rank: usize,
    pub size: usize,
    /// Query heads.
    pub heads: Range<usize>,
    /// KV heads the rank's query heads read.
    pub kv_heads: Range<usize>,
    /// Columns of the FFN's intermediate size.
    pub ffn: Range<usize>,
    /// Rows of the LM head.
    pub vocab: Range<usize>,
    /// Every rank's rows of the LM head, in rank order (how gathered logits are laid out).
    pub vocab_parts: Vec<Range<usize>>,
}

impl Shard {
    /// The whole model (one rank).
    pub fn whole(c: &ModelConfig) -> Self {
        Self {
            rank: 0,
            size: 1,
            heads: 0..c.n_heads,
            kv_heads: 0..c.n_kv_heads,
            ffn: 0..c.ffn_dim,
            vocab: 0..c.vocab_size,
            vocab_parts: std::iter::once(0..c.vocab_size).collect(),
        }
    }

    /// Rank `rank` of `size`, the FFN split in whole runs of `ffn_align` columns (the largest
    /// quant block of any layer's `ffn_down`).
    pub fn plan(
        c: &ModelConfig,
        rank: usize,
        size: usize,
        ffn_align: usize,
    ) -> Result<Self, TpError> {
        check_heads(c, size)?;
        let per_rank = c.n_heads / size;
        let kv_heads = if c.n_kv_heads >= size {
            let n = c.n_kv_heads / size;
            rank * n..(rank + 1) * n
        } else {
            // Replicated: every group of size / n_kv_heads ranks reads one KV head.
            let kv = rank * c.n_kv_heads / size;
            kv..kv + 1
        };
        // Whole 8-row groups keep the packed LM head's kernels on every part.
        let vocab_parts = (0..size)
            .map(|r| split("the vocabulary", c.vocab_size, size, 8, r))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            rank,
            size,
            heads: rank * per_rank..(rank + 1) * per_rank,
            kv_heads,
            ffn: split("the FFN size", c.ffn_dim, size, ffn_align.max(8), rank)?,
            vocab: vocab_parts[rank].clone(),
            vocab_parts,
        })
    }

    /// This rank's view of the configuration: its heads and FFN columns (the vocabulary stays
    /// whole: the logits are gathered).
    pub fn local_config(&self, c: &ModelConfig) -> ModelConfig {
        ModelConfig {
            n_heads: self.heads.len(),
            n_kv_heads: self.kv_heads.len(),
            ffn_dim: self.ffn.len(),
            ..c.clone()
        }
    }

    /// Rows `units` of `per` rows each (heads of `head_dim`).
    pub fn rows(units: &Range<usize>, per: usize) -> Range<usize> {
        units.start * per..units.end * per
    }
}

/// The start-up rules on head counts.
pub fn check_heads(c: &ModelConfig, size: usize) -> Result<(), TpError> {
    if size == 0 {
        return Err(TpError::ZeroSize);
    }
    if !c.n_heads.is_multiple_of(size) {
        return Err(TpError::HeadsNotDivisible {
            heads: c.n_heads,
            size,
        });
    }
    if !(c.n_kv_heads.is_multiple_of(size) || size.is_multiple_of(c.n_kv_heads)) {
        return Err(TpError::KvHeadsIncompatible {
            kv_heads: c.n_kv_heads,
            size,
        });
    }
    Ok(())
}

/// Part `rank` of `total` split over `size` in whole runs of `align` (the first parts one
/// run longer when the runs do not divide evenly).
fn split(
    what: &'static str,
    total: usize,
    size: usize,
    align: usize,
    rank: usize,
) -> Result<Range<usize>, TpError> {
    let too_small = TpError::TooSmall {
        what,
        total,
        size,
        align,
    };
    let units = total / align;
    // A remainder of less than one run goes to the last rank.
    if units < size {
        return Err(too_small);
    }
    let (base, extra) = (units / size, units % size);
    let start = (rank * base + rank.min(extra)) * align;
    let len = (base + usize::from(rank < extra)) * align;
    let end = if rank + 1 == size { total } else { start + len };
    Ok(start..end)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn splits_cover_the_whole_in_whole_runs() {
        // Qwen2.5 0.5B's FFN: 4864 = 19 blocks of 256 over 2 ranks.
        let parts: Vec<_> = (0..2)
            .map(|r| split("ffn", 4864, 2, 256, r).unwrap())
            .collect();
        assert_eq!(parts, [0..2560, 2560..4864]);
        let parts: Vec<_> = (0..3).map(|r| split("v", 100, 3, 8, r).unwrap()).collect();
        assert_eq!(parts, [0..32, 32..64, 64..100]);
        assert!(split("ffn", 256, 2, 256, 0).is_err());
    }
}
