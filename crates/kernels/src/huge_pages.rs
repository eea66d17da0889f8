//! Zeroed byte buffers for data a decode step streams whole (the packed weights), placed in
//! anonymous memory advised for transparent huge pages. Every token reads every weight once;
//! with 4 KB pages that walk crosses a page boundary every 4 KB, and the hardware prefetchers
//! stop at each one. Where the advice is refused (THP off, other OSes), the buffer is plain.

use std::ops::{Deref, DerefMut};

/// A zero-initialised, fixed-size byte buffer.
pub(crate) enum HugeBuffer {
    Mapped(memmap2::MmapMut),
    Heap(Vec<u8>),
}

impl HugeBuffer {
    /// `len` zero bytes, on huge pages when the OS grants them.
    pub(crate) fn zeroed(len: usize) -> Self {
        // Below one huge page the advice cannot apply; a heap allocation is cheaper.
        if len >= 2 << 20
            && let Ok(map) = memmap2::MmapMut::map_anon(len)
        {
            // Advice only: a refusal leaves ordinary pages, which work the same.
            #[cfg(target_os = "linux")]
            let _ = map.advise(memmap2::Advice::HugePage);
            return Self::Mapped(map);
        }
        Self::Heap(vec![0; len])
    }
}

impl Deref for HugeBuffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Self::Mapped(m) => m,
            Self::Heap(v) => v,
        }
    }
}

impl DerefMut for HugeBuffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        match self {
            Self::Mapped(m) => m,
            Self::Heap(v) => v,
        }
    }
}
