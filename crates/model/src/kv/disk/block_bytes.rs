//! One KV block as bytes: every arena slot's K then V values of the block, then for int8 every
//! slot's K then V scales, each element little-endian as in memory. A block's payload is a
//! function of its id alone (`kv/cache.rs`), whichever KV group it serves, so saving and
//! restoring it is a memcpy of fixed ranges (about 0.1 ms for SmolLM2's 360 KiB block).

use crate::kv::cache::{Arenas, KvCache};

// The file format is little-endian and the copies below are of memory as it is.
const _: () = assert!(
    cfg!(target_endian = "little"),
    "the KV disk tier's block files are little-endian"
);

/// Element types of the arenas: plain numbers, no padding, every bit pattern valid.
trait Plain: Copy {}
impl Plain for f32 {}
impl Plain for half::f16 {}
impl Plain for i8 {}

fn push<T: Plain>(out: &mut Vec<u8>, v: &[T]) {
    // SAFETY: `T` is a plain number type (f32, f16 = repr(transparent) u16, i8) without padding,
    // so its memory is `size_of_val(v)` initialised bytes.
    let bytes = unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), size_of_val(v)) };
    out.extend_from_slice(bytes);
}

fn fill<T: Plain>(dst: &mut [T], src: &[u8]) {
    debug_assert_eq!(src.len(), size_of_val(dst));
    let n = src.len().min(size_of_val(dst));
    // SAFETY: at most `size_of_val(dst)` bytes are copied into `dst`, from a distinct buffer;
    // every bit pattern is a valid `T` (plain numbers), so `dst` stays valid.
    unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst.as_mut_ptr().cast::<u8>(), n) };
}

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
            Arenas::F32 { k, v } => k.iter().chain(v).for_each(|a| push(out, &a[vals.clone()])),
            Arenas::F16 { k, v } => k.iter().chain(v).for_each(|a| push(out, &a[vals.clone()])),
            Arenas::Int8 {
                k,
                v,
                k_scales,
                v_scales,
            } => {
                k.iter().chain(v).for_each(|a| push(out, &a[vals.clone()]));
                let scales = k_scales.iter().chain(v_scales);
                scales.for_each(|s| push(out, &s[rows.clone()]));
            }
        }
    }

    /// Block `b`'s payload (empty when `b` is out of range).
    pub fn read_payload(&self, b: u32) -> Vec<u8> {
        let mut out = Vec::new();
        self.read_block(b, &mut out);
        out
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
                    fill(&mut a[vals.clone()], take(vals.len() * 4));
                }
            }
            Arenas::F16 { k, v } => {
                for a in k.iter_mut().chain(v) {
                    fill(&mut a[vals.clone()], take(vals.len() * 2));
                }
            }
            Arenas::Int8 {
                k,
                v,
                k_scales,
                v_scales,
            } => {
                for a in k.iter_mut().chain(v.iter_mut()) {
                    fill(&mut a[vals.clone()], take(vals.len()));
                }
                for s in k_scales.iter_mut().chain(v_scales.iter_mut()) {
                    fill(&mut s[rows.clone()], take(rows.len() * 4));
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
