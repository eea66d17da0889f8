//! Where a packed matrix's bytes live: a huge-page buffer of its own (packed at load), or a
//! range of a read-only buffer shared with other matrices (a mapped cache file of packed
//! layouts). The kernels read both the same way, through one slice.

use std::ops::Range;
use std::sync::Arc;

use crate::huge_pages::HugeBuffer;

/// Alignment of the first byte of a packed matrix, owned or shared: a cache line, like every
/// [`HugeBuffer`], so a matrix read from a cache file sits in memory as one packed at load does.
pub const PACKED_ALIGN: usize = 64;

/// A read-only mapping several packed matrices borrow ranges of (a cache file, in practice).
pub type SharedBytes = Arc<memmap2::Mmap>;

/// The bytes of one packed matrix.
pub(super) enum PackedBytes {
    /// Packed in this process.
    Owned(HugeBuffer),
    /// `range` of `bytes`, checked in bounds and [`PACKED_ALIGN`]ed when made.
    Shared {
        bytes: SharedBytes,
        range: Range<usize>,
    },
}

impl PackedBytes {
    /// `range` of `bytes`, or `None` when it is out of bounds or its start is not aligned to
    /// [`PACKED_ALIGN`] in memory.
    pub(super) fn shared(bytes: SharedBytes, range: Range<usize>) -> Option<Self> {
        let slice = bytes.get(range.clone())?;
        if !(slice.as_ptr() as usize).is_multiple_of(PACKED_ALIGN) {
            return None;
        }
        Some(Self::Shared { bytes, range })
    }

    /// True when the bytes are borrowed from a shared buffer.
    pub(super) fn is_shared(&self) -> bool {
        matches!(self, Self::Shared { .. })
    }
}

impl std::ops::Deref for PackedBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Self::Owned(buf) => buf,
            // `shared` checked the range against these immutable bytes; an empty slice is
            // unreachable and would only make the kernels' bounds checks fail.
            Self::Shared { bytes, range } => bytes.get(range.clone()).unwrap_or(&[]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::{self, SimdLevel};
    use crate::matmul::{MatmulScratch, matmul_packed};
    use crate::quant::packed::PackedMatrix;
    use crate::quant::{GgmlType, quantize_row};

    /// `bytes` at `offset` of a read-only anonymous map of `len` bytes.
    fn mapped(bytes: &[u8], offset: usize, len: usize) -> SharedBytes {
        let mut map = memmap2::MmapMut::map_anon(len).unwrap_or_else(|e| panic!("map: {e}"));
        map[offset..offset + bytes.len()].copy_from_slice(bytes);
        Arc::new(
            map.make_read_only()
                .unwrap_or_else(|e| panic!("protect: {e}")),
        )
    }

    fn weights(ty: GgmlType, n: usize, k: usize) -> Vec<u8> {
        let rb = ty.row_bytes(k).unwrap_or(0);
        let mut w = vec![0u8; n * rb];
        for r in 0..n {
            let row: Vec<f32> = (0..k)
                .map(|i| ((r * 31 + i * 7) % 23) as f32 - 11.0)
                .collect();
            quantize_row(ty, &row, &mut w[r * rb..(r + 1) * rb]);
        }
        w
    }

    #[test]
    fn a_shared_copy_of_the_packed_bytes_multiplies_bit_for_bit_like_the_original() {
        if cpu::simd_level() != SimdLevel::Avx2 {
            return;
        }
        for (ty, k) in [
            (GgmlType::Q8_0, 64),
            (GgmlType::Q4_K, 256),
            (GgmlType::Q6_K, 512),
        ] {
            let n = 13;
            let Some(p) = PackedMatrix::pack(ty, n, k, &weights(ty, n, k)) else {
                panic!("{ty} packs on AVX2");
            };
            assert_eq!(PackedMatrix::packed_len(ty, n, k), Some(p.len_bytes()));
            let at = 2 * PACKED_ALIGN;
            let map = mapped(p.as_bytes(), at, at + p.len_bytes() + 100);
            let range = at..at + p.len_bytes();
            let Some(q) = PackedMatrix::from_shared(ty, n, k, Arc::clone(&map), range) else {
                panic!("{ty}: the packed range is valid");
            };
            assert!(q.is_shared() && !p.is_shared());
            let x: Vec<f32> = (0..3 * k).map(|i| (i % 17) as f32 * 0.25 - 2.0).collect();
            let (mut y0, mut y1) = (vec![0.0; 3 * n], vec![1.0; 3 * n]);
            let mut scratch = MatmulScratch::default();
            matmul_packed(&p, &x, 3, &mut y0, &mut scratch);
            matmul_packed(&q, &x, 3, &mut y1, &mut scratch);
            assert_eq!(
                y0.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                y1.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "{ty}"
            );
        }
    }

    #[test]
    fn ranges_that_cannot_be_the_matrix_are_refused() {
        let (ty, n, k) = (GgmlType::Q8_0, 8, 32);
        let Some(len) = PackedMatrix::packed_len(ty, n, k) else {
            return; // no packed kernels on this CPU: nothing is ever shared
        };
        let map = mapped(&[], 0, 4 * PACKED_ALIGN + len);
        let from = |r: Range<usize>| PackedMatrix::from_shared(ty, n, k, Arc::clone(&map), r);
        assert!(from(PACKED_ALIGN..PACKED_ALIGN + len).is_some());
        assert!(
            from(PACKED_ALIGN..PACKED_ALIGN + len - 1).is_none(),
            "short"
        );
        assert!(
            from(PACKED_ALIGN + 8..PACKED_ALIGN + 8 + len).is_none(),
            "misaligned"
        );
        assert!(
            from(4 * PACKED_ALIGN..4 * PACKED_ALIGN + len + 1).is_none(),
            "past the end"
        );
        assert!(
            from(usize::MAX - len..usize::MAX).is_none(),
            "far past the end"
        );
        assert!(PackedMatrix::from_shared(GgmlType::F32, n, k, map, 0..len).is_none());
    }
}
