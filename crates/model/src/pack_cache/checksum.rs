//! The pack cache's checksum: fast enough to check every byte of a cache file at each load
//! (a few hundred megabytes in tens of milliseconds), strong enough to catch a torn or flipped
//! write. Not cryptographic: the file is ours, the threat is damage, not an adversary.

/// Eight independent lanes keep the multiplier busy; one lane would be latency-bound.
const LANES: usize = 8;
const K: u64 = 0x9E37_79B9_7F4A_7C15;

/// Checksum of `bytes`. Each step (`xor` a word, multiply by an odd constant, rotate) is a
/// bijection of the lane, so bytes that differ in a single word always differ in the result.
pub(crate) fn checksum(bytes: &[u8]) -> u64 {
    let mut lanes: [u64; LANES] = std::array::from_fn(|i| K.wrapping_mul(i as u64 + 1));
    let mut chunks = bytes.chunks_exact(8 * LANES);
    for chunk in &mut chunks {
        for (lane, word) in lanes.iter_mut().zip(chunk.chunks_exact(8)) {
            *lane = mix(*lane, word);
        }
    }
    let mut tail = [0u8; 8 * LANES];
    let rest = chunks.remainder();
    tail[..rest.len()].copy_from_slice(rest);
    for (lane, word) in lanes.iter_mut().zip(tail.chunks_exact(8)) {
        *lane = mix(*lane, word);
    }
    // The length tells apart inputs that differ only in trailing zero bytes.
    let mut h = bytes.len() as u64;
    for lane in lanes {
        h = (h ^ lane).wrapping_mul(K).rotate_left(27);
    }
    h ^ (h >> 32)
}

#[inline(always)]
fn mix(lane: u64, word: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(word);
    (lane ^ u64::from_le_bytes(w))
        .wrapping_mul(K)
        .rotate_left(31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_changed_byte_length_or_position_changes_the_checksum() {
        let base: Vec<u8> = (0..1000u32).map(|i| (i * 7 % 251) as u8).collect();
        let c = checksum(&base);
        assert_eq!(c, checksum(&base.clone()));
        for at in [0, 7, 63, 64, 500, 959, 960, 999] {
            for bit in [0, 7] {
                let mut b = base.clone();
                b[at] ^= 1 << bit;
                assert_ne!(checksum(&b), c, "byte {at} bit {bit}");
            }
        }
        let mut longer = base.clone();
        longer.push(0);
        assert_ne!(checksum(&longer), c);
        assert_ne!(checksum(&base[..999]), c);
        assert_ne!(checksum(&[]), checksum(&[0]));
        let mut swapped = base.clone();
        swapped.swap(0, 8);
        assert_ne!(checksum(&swapped), c);
    }
}
