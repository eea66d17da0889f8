//! Zeroed byte buffers for data a decode step streams whole (the packed weights), carved from
//! 64 MB chunks of anonymous memory advised for transparent huge pages. Every token reads every
//! weight once; with 4 KB pages that walk crosses a page boundary every 4 KB, and the hardware
//! prefetchers stop at each one. A model's matrices are mostly well under the 2 MB of a huge page,
//! so they share chunks rather than each getting its own mapping. Where the advice is refused
//! (THP off, other OSes), the memory is ordinary pages, which work the same.

use std::sync::{Arc, Mutex};

/// Size of a shared chunk; larger buffers get a mapping of their own.
const CHUNK_BYTES: usize = 64 << 20;
/// Start of every buffer in a chunk: a cache line, as the kernels' 32-byte loads like.
const ALIGN: usize = 64;

/// A zero-initialised, fixed-size byte buffer: an exclusive range of a shared chunk.
pub(crate) struct HugeBuffer {
    /// Keeps the chunk mapped; `None` for an empty buffer.
    _chunk: Option<Arc<Chunk>>,
    ptr: *mut u8,
    len: usize,
}

// SAFETY: a `HugeBuffer` is the only handle to its byte range (the arena hands each range out
// once, and the chunk's owner never touches the memory), so it is as thread-safe as a `Vec<u8>`.
unsafe impl Send for HugeBuffer {}
unsafe impl Sync for HugeBuffer {}

/// One mapping (or, where mapping fails, heap allocation) that buffers are carved from.
struct Chunk {
    memory: Memory,
}

enum Memory {
    Mapped(#[allow(dead_code)] memmap2::MmapMut),
    Heap(*mut [u8]),
}

// SAFETY: the chunk only owns the memory (freed in `drop`); all access goes through the
// `HugeBuffer`s carved from it, each over its own range.
unsafe impl Send for Chunk {}
unsafe impl Sync for Chunk {}

impl Chunk {
    /// A zeroed chunk of `len` bytes and its base pointer.
    fn new(len: usize) -> (Arc<Self>, *mut u8) {
        match memmap2::MmapMut::map_anon(len) {
            Ok(mut map) => {
                // Advice only: a refusal leaves ordinary pages.
                #[cfg(target_os = "linux")]
                let _ = map.advise(memmap2::Advice::HugePage);
                let base = map.as_mut_ptr();
                (
                    Arc::new(Self {
                        memory: Memory::Mapped(map),
                    }),
                    base,
                )
            }
            Err(_) => {
                let heap = Box::into_raw(vec![0u8; len].into_boxed_slice());
                let base = heap.cast::<u8>();
                (
                    Arc::new(Self {
                        memory: Memory::Heap(heap),
                    }),
                    base,
                )
            }
        }
    }
}

impl Drop for Chunk {
    fn drop(&mut self) {
        if let Memory::Heap(heap) = self.memory {
            // SAFETY: `heap` came from `Box::into_raw` in `Chunk::new` and is freed only here.
            drop(unsafe { Box::from_raw(heap) });
        }
    }
}

/// The chunk buffers are currently carved from.
struct Open {
    chunk: Arc<Chunk>,
    base: *mut u8,
    used: usize,
}

// SAFETY: `base` points into `chunk`, which the arena keeps alive; see `HugeBuffer`.
unsafe impl Send for Open {}

static ARENA: Mutex<Option<Open>> = Mutex::new(None);

impl HugeBuffer {
    /// `len` zero bytes, on huge pages when the OS grants them.
    pub(crate) fn zeroed(len: usize) -> Self {
        if len == 0 {
            return Self {
                _chunk: None,
                ptr: std::ptr::NonNull::dangling().as_ptr(),
                len,
            };
        }
        if len > CHUNK_BYTES / 2 {
            let (chunk, base) = Chunk::new(len);
            return Self {
                _chunk: Some(chunk),
                ptr: base,
                len,
            };
        }
        // A poisoned lock only means a panic elsewhere while carving; the state is consistent.
        let mut arena = ARENA.lock().unwrap_or_else(|e| e.into_inner());
        let at = arena.as_ref().map(|open| open.used.next_multiple_of(ALIGN));
        let open = match (arena.as_mut(), at) {
            (Some(open), Some(at)) if at + len <= CHUNK_BYTES => {
                open.used = at;
                open
            }
            _ => {
                let (chunk, base) = Chunk::new(CHUNK_BYTES);
                arena.insert(Open {
                    chunk,
                    base,
                    used: 0,
                })
            }
        };
        // SAFETY: `used + len <= CHUNK_BYTES`, inside the chunk; the range is handed out once.
        let ptr = unsafe { open.base.add(open.used) };
        open.used += len;
        Self {
            _chunk: Some(Arc::clone(&open.chunk)),
            ptr,
            len,
        }
    }
}

impl std::ops::Deref for HugeBuffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr..ptr + len` is this buffer's own range of a live chunk (or empty).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl std::ops::DerefMut for HugeBuffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and no other handle reaches this range.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_zeroed_disjoint_and_aligned() {
        let mut bufs: Vec<HugeBuffer> = [0, 1, 100, 4096, 3 << 20, 40 << 20]
            .into_iter()
            .map(HugeBuffer::zeroed)
            .collect();
        for (i, b) in bufs.iter_mut().enumerate() {
            assert!(b.iter().all(|&x| x == 0));
            if !b.is_empty() {
                assert_eq!(b.as_ptr() as usize % ALIGN, 0);
            }
            b.fill(i as u8 + 1);
        }
        for (i, b) in bufs.iter().enumerate() {
            assert!(
                b.iter().all(|&x| x == i as u8 + 1),
                "buffer {i} was overwritten"
            );
        }
    }
}
