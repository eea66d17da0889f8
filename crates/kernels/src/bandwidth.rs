//! The machine's plain read bandwidth, the bound of a batch-1 decode step (every weight read once
//! per token). Benches set a step's weight stream against it in the same run: on a shared host
//! the bandwidth moves by a third from one minute to the next, so a figure from another sitting
//! says little.

use std::hint::black_box;
use std::time::Instant;

/// Sub-streams each thread's part is read as, a cache line of each in turn: on the 2-core
/// machine this project measures on, four draw ~20% more than one sequential stream, so the
/// bound is taken at the better figure.
const READ_STREAMS: usize = 4;

/// A buffer to read, on huge pages when the OS grants them (as the packed weights are).
pub struct ReadProbe {
    map: memmap2::MmapMut,
    threads: usize,
}

impl ReadProbe {
    /// A probe over `bytes` of memory (make it larger than the last-level cache), read by
    /// `threads` threads.
    pub fn new(bytes: usize, threads: usize) -> std::io::Result<Self> {
        let len = bytes.max(8 * 64 * READ_STREAMS);
        let mut map = memmap2::MmapMut::map_anon(len)?;
        // Advice only; without huge pages the probe still measures, a little lower.
        let _ = map.advise(memmap2::Advice::HugePage);
        for (i, b) in map.iter_mut().enumerate() {
            *b = i as u8;
        }
        let probe = Self {
            map,
            threads: threads.max(1),
        };
        // The first pass also writes back the lines the fill left dirty in the caches.
        probe.measure();
        Ok(probe)
    }

    /// Reads the whole buffer once (each thread a contiguous part, as [`READ_STREAMS`]
    /// interleaved streams) and returns the bytes read per second.
    pub fn measure(&self) -> f64 {
        let parts: Vec<&[u8]> = {
            let part = self.map.len().div_ceil(self.threads);
            self.map.chunks(part).collect()
        };
        let t0 = Instant::now();
        let read: usize = std::thread::scope(|s| {
            let handles: Vec<_> = parts
                .iter()
                .map(|&c| s.spawn(move || read_part(c)))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap_or(0)).sum()
        });
        read as f64 / t0.elapsed().as_secs_f64()
    }
}

/// Sums `c` as [`READ_STREAMS`] interleaved streams of 64-byte lines; returns the bytes read.
fn read_part(c: &[u8]) -> usize {
    let sub = c.len() / READ_STREAMS / 64 * 64;
    let mut acc = [0u64; 8];
    for line in (0..sub).step_by(64) {
        for k in 0..READ_STREAMS {
            let bytes = &c[k * sub + line..][..64];
            for (a, w) in acc.iter_mut().zip(bytes.chunks_exact(8)) {
                let mut v = [0u8; 8];
                v.copy_from_slice(w);
                *a = a.wrapping_add(u64::from_le_bytes(v));
            }
        }
    }
    black_box(acc);
    sub * READ_STREAMS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measures_a_positive_finite_rate() {
        let probe = match ReadProbe::new(1 << 20, 2) {
            Ok(p) => p,
            Err(e) => panic!("anonymous map: {e}"),
        };
        let rate = probe.measure();
        assert!(rate.is_finite() && rate > 0.0, "{rate}");
    }
}
