//! A KV block's bytes across tensor-parallel ranks. A payload (`kv/disk/block_bytes.rs`) is
//! sections laid out head-major: every arena slot's K then V values, then for int8 every
//! slot's K then V scales. A rank's payload holds its KV heads' rows of each section; the whole
//! payload, the one the disk tier and KV transfers store, holds every KV head's in head order,
//! byte for byte what one process writes, so a file or a transfer does not depend on the split.

use std::ops::Range;

use crate::KvCacheDtype;
use crate::kv::cache::KvCache;

/// The sections of a block's payload, as bytes per KV head.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BlockSections {
    /// `(sections, bytes per head in each)`, in payload order.
    groups: Vec<(usize, usize)>,
}

impl BlockSections {
    /// The sections of `kv`'s payloads (the same for every rank: only the head counts differ).
    pub(crate) fn of(kv: &KvCache) -> Self {
        let l = kv.layout();
        let slots = 2 * kv.num_arena_slots();
        let values = l.block_size * l.head_dim;
        let groups = match kv.dtype() {
            KvCacheDtype::F32 => vec![(slots, values * 4)],
            KvCacheDtype::F16 => vec![(slots, values * 2)],
            KvCacheDtype::Int8 => vec![(slots, values), (slots, l.block_size * 4)],
        };
        Self { groups }
    }

    /// Payload bytes of `heads` KV heads.
    fn len(&self, heads: usize) -> usize {
        heads * self.groups.iter().map(|(n, c)| n * c).sum::<usize>()
    }

    /// The whole payload from the ranks' `(KV heads, payload)`, in rank order; ranks holding
    /// the same heads (replicated) give them once. `None` when a part's length does not match
    /// its heads (a block a rank could not read).
    pub(crate) fn merge(&self, parts: &[(Range<usize>, Vec<u8>)]) -> Option<Vec<u8>> {
        let mut distinct: Vec<&(Range<usize>, Vec<u8>)> = Vec::new();
        for p in parts {
            if p.1.len() != self.len(p.0.len()) {
                return None;
            }
            if !distinct.iter().any(|d| d.0 == p.0) {
                distinct.push(p);
            }
        }
        distinct.sort_by_key(|p| p.0.start);
        let heads: usize = distinct.iter().map(|p| p.0.len()).sum();
        let mut out = Vec::with_capacity(self.len(heads));
        let mut at = 0; // where the current section starts in a one-head payload
        for &(n, chunk) in &self.groups {
            for s in 0..n {
                for (range, bytes) in distinct.iter().map(|p| (&p.0, &p.1)) {
                    let h = range.len();
                    let start = h * (at + s * chunk);
                    out.extend_from_slice(&bytes[start..start + h * chunk]);
                }
            }
            at += n * chunk;
        }
        Some(out)
    }

    /// Heads `mine`'s part of a whole payload of `heads` KV heads; `None` when its length is
    /// not a whole payload's.
    pub(crate) fn part(&self, whole: &[u8], heads: usize, mine: &Range<usize>) -> Option<Vec<u8>> {
        if whole.len() != self.len(heads) || mine.end > heads {
            return None;
        }
        let mut out = Vec::with_capacity(self.len(mine.len()));
        let mut at = 0;
        for &(n, chunk) in &self.groups {
            for s in 0..n {
                let section = heads * (at + s * chunk);
                let from = section + mine.start * chunk;
                out.extend_from_slice(&whole[from..from + mine.len() * chunk]);
            }
            at += n * chunk;
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Two sections of 3 bytes a head and one of 2, over 4 heads: byte = 10 x head + offset.
    fn sections() -> BlockSections {
        BlockSections {
            groups: vec![(2, 3), (1, 2)],
        }
    }

    fn whole(heads: usize) -> Vec<u8> {
        let s = sections();
        let mut out = Vec::new();
        let mut at = 0;
        for &(n, chunk) in &s.groups {
            for sec in 0..n {
                for h in 0..heads {
                    for i in 0..chunk {
                        out.push((10 * h + at + sec * chunk + i) as u8);
                    }
                }
            }
            at += n * chunk;
        }
        out
    }

    #[test]
    fn parts_merge_back_into_the_whole() {
        let s = sections();
        let w = whole(4);
        let parts: Vec<_> = [0..2, 2..4]
            .into_iter()
            .map(|r| (r.clone(), s.part(&w, 4, &r).unwrap()))
            .collect();
        assert_eq!(parts[1].1[..3], [20, 21, 22], "head 2's first section");
        assert_eq!(s.merge(&parts).unwrap(), w);
        // In any rank order, and with a replicated part given twice.
        let mut shuffled = vec![parts[1].clone(), parts[0].clone(), parts[1].clone()];
        assert_eq!(s.merge(&shuffled).unwrap(), w);
        shuffled[0].1.pop();
        assert_eq!(s.merge(&shuffled), None, "a short part");
        assert_eq!(s.part(&w[1..], 4, &(0..2)), None, "a short whole");
    }
}
