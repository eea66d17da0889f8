//! A digest of the packed layouts this CPU's packer writes: a small fixed matrix of every type
//! with packed kernels is packed and the bytes hashed. Whatever stores packed weights across
//! processes keys them on it, so a change to any packer (or to the level that picks one)
//! invalidates them by itself, with no version number to remember to bump.

use super::{GROUP_ROWS, PackedMatrix, kernels};
use crate::cpu::{self, SimdLevel};
use crate::quant::GgmlType;

/// The packed-layout digest for this CPU's SIMD level; `None` when no type packs here (nothing
/// packed is then worth storing).
pub fn layout_fingerprint() -> Option<u64> {
    layout_fingerprint_at(cpu::simd_level())
}

/// [`layout_fingerprint`] for an explicit SIMD level.
pub fn layout_fingerprint_at(level: SimdLevel) -> Option<u64> {
    let mut h = Fnv::default();
    h.write(format!("{level:?}").as_bytes());
    let mut packed_any = false;
    // Every ggml id, so a type that gains packed kernels joins the digest without an edit here.
    for ty in (0..=u8::MAX).filter_map(|id| GgmlType::from_id(id.into())) {
        if kernels(ty).is_none() {
            continue;
        }
        // Two groups (the second padded with zero rows) of two blocks: covers the group and
        // block order as well as each group block's layout.
        let (n, k) = (GROUP_ROWS + 1, 2 * ty.block_size());
        let Some(row_bytes) = ty.row_bytes(k) else {
            continue;
        };
        let w = pattern(n * row_bytes, ty.id());
        h.write(&ty.id().to_le_bytes());
        if let Some(p) = PackedMatrix::pack_at(level, ty, n, k, &w) {
            h.write(&(p.len_bytes() as u64).to_le_bytes());
            h.write(p.as_bytes());
            packed_any = true;
        }
    }
    packed_any.then_some(h.0)
}

/// `len` bytes of a fixed xorshift sequence seeded by `seed`.
fn pattern(len: usize, seed: u32) -> Vec<u8> {
    let mut x = 0x9E37_79B9_u32 ^ seed.wrapping_mul(0x0101_0101);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x >> 24) as u8
        })
        .collect()
}

/// 64-bit FNV-1a: a few kilobytes are hashed once per process, so speed does not matter.
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fingerprint_is_stable_within_a_build_and_absent_without_packed_kernels() {
        assert_eq!(layout_fingerprint_at(SimdLevel::Scalar), None);
        if crate::quant::dispatch::level_supported(SimdLevel::Avx2) {
            let a = layout_fingerprint_at(SimdLevel::Avx2);
            assert!(a.is_some());
            assert_eq!(a, layout_fingerprint_at(SimdLevel::Avx2));
        }
    }

    #[test]
    fn the_pattern_covers_every_byte_value() {
        let p = pattern(4096, 3);
        let mut seen = [false; 256];
        p.iter().for_each(|&b| seen[b as usize] = true);
        assert!(seen.iter().all(|&s| s));
        assert_ne!(pattern(64, 3), pattern(64, 4));
    }
}
