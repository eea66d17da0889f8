//! One KV block as bytes: every arena slot's K then V values of the block (little-endian
//! elements), then for int8 every slot's K then V scales. A block's payload is a function of
//! its id alone (`kv_cache.rs`), whichever KV group it serves, so saving and restoring it is a
//! copy of fixed ranges.

use half::f16;

use crate::kv_cache::{Arenas, KvCache};

impl KvCache {
    /// Bytes of one block's payload.
    pub fn block_payload_len(&self) -> usize {
        let l = self.layout();
        let values = l.num_kv_heads * l.block_size * l.head_dim;
        let rows = l.num_kv_heads * l.block_size;
        let slots = self.num_arena_slots();
        match self.dtype() {
            crate::KvCacheDtype::F32 => 2 * slots * values * 4,
            crate::KvCacheDtype::F16 => 2 * slots * values * 2,
            crate::KvCacheDtype::Int8 => 2 * slots * (values + rows * 4),
        }
    }

    /// Appends block `b`'s payload to `out` (nothing when `b` is out of range).
    pub fn read_block(&self, b: u32, out: &mut Vec<u8>) {
        let (vals, rows) = self.block_ranges(b);
        if vals.end > self.layout().arena_len() {
            return;
        }
        out.reserve(self.block_payload_len());
        match self.arenas() {
            Arenas::F32 { k, v } => {
                for a in k.iter().chain(v) {
                    a[vals.clone()]
                        .iter()
                        .for_each(|x| out.extend_from_slice(&x.to_le_bytes()));
                }
            }
            Arenas::F16 { k, v } => {
                for a in k.iter().chain(v) {
                    a[vals.clone()]
                        .iter()
                        .for_each(|x| out.extend_from_slice(&x.to_bits().to_le_bytes()));
                }
            }
            Arenas::Int8 {
                k,
                v,
                k_scales,
                v_scales,
            } => {
                for a in k.iter().chain(v) {
                    out.extend(a[vals.clone()].iter().map(|&x| x as u8));
                }
                for s in k_scales.iter().chain(v_scales) {
                    s[rows.clone()]
                        .iter()
                        .for_each(|x| out.extend_from_slice(&x.to_le_bytes()));
                }
            }
        }
    }

    /// Writes a payload read by [`KvCache::read_block`] into block `b`; false (nothing
    /// written) when its length is not this cache's block payload or `b` is out of range.
    pub fn write_block(&mut self, b: u32, bytes: &[u8]) -> bool {
        let (vals, rows) = self.block_ranges(b);
        if bytes.len() != self.block_payload_len() || vals.end > self.layout().arena_len() {
            return false;
        }
        let mut at = 0;
        let mut take = |n: usize| {
            let s = &bytes[at..at + n];
            at += n;
            s
        };
        match self.arenas_mut() {
            Arenas::F32 { k, v } => {
                for a in k.iter_mut().chain(v) {
                    let src = take(vals.len() * 4);
                    for (d, c) in a[vals.clone()].iter_mut().zip(src.chunks_exact(4)) {
                        *d = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                    }
                }
            }
            Arenas::F16 { k, v } => {
                for a in k.iter_mut().chain(v) {
                    let src = take(vals.len() * 2);
                    for (d, c) in a[vals.clone()].iter_mut().zip(src.chunks_exact(2)) {
                        *d = f16::from_bits(u16::from_le_bytes([c[0], c[1]]));
                    }
                }
            }
            Arenas::Int8 {
                k,
                v,
                k_scales,
                v_scales,
            } => {
                for a in k.iter_mut().chain(v.iter_mut()) {
                    let src = take(vals.len());
                    for (d, &c) in a[vals.clone()].iter_mut().zip(src) {
                        *d = c as i8;
                    }
                }
                for s in k_scales.iter_mut().chain(v_scales.iter_mut()) {
                    let src = take(rows.len() * 4);
                    for (d, c) in s[rows.clone()].iter_mut().zip(src.chunks_exact(4)) {
                        *d = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                    }
                }
            }
        }
        true
    }

    /// Element ranges of block `b` in a value arena and in a scale array.
    fn block_ranges(&self, b: u32) -> (std::ops::Range<usize>, std::ops::Range<usize>) {
        let l = self.layout();
        let rows = l.num_kv_heads * l.block_size;
        let values = rows * l.head_dim;
        let b = b as usize;
        (b * values..(b + 1) * values, b * rows..(b + 1) * rows)
    }
}
