//! A block file: header (magic, version, layout digest, block key, payload length), payload,
//! then a checksum of both (the pack cache's: catches torn and flipped writes at a few GB/s).
//! Little-endian throughout. The file is named after its key (`<64 hex>.kvb`), so the
//! start-up scan reads headers only; the checksum is verified whenever a file is read back.

use pagoda_core::kv::BlockHash;

use crate::pack_cache::checksum::checksum;

pub(crate) const MAGIC: [u8; 8] = *b"PGDKVBLK";
pub(crate) const VERSION: u32 = 1;
/// magic + version + layout digest + key + payload length.
pub(crate) const HEADER_LEN: usize = 8 + 4 + 32 + 32 + 8;
const CHECKSUM_LEN: usize = 8;
/// Suffix of a finished block file; `.tmp` while it is written.
pub(crate) const SUFFIX: &str = "kvb";
pub(crate) const TMP_SUFFIX: &str = "tmp";

/// Why a file is not a usable block of this store (it is then deleted).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Bad {
    Truncated,
    NotABlock,
    /// Another format version, model file, KV dtype, block size or layer layout.
    Foreign,
    /// The name and the key inside disagree.
    WrongKey,
    Corrupt,
}

/// Total file length for a payload of `payload_len` bytes.
pub(crate) fn file_len(payload_len: usize) -> u64 {
    (HEADER_LEN + payload_len + CHECKSUM_LEN) as u64
}

/// The whole file for `payload`.
pub(crate) fn encode(digest: &[u8; 32], key: &BlockHash, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(file_len(payload.len()) as usize);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(digest);
    out.extend_from_slice(&key.0);
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(payload);
    let sum = checksum(&out);
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

/// Checks a header (the first `HEADER_LEN` bytes of a file of `file_len` bytes).
pub(crate) fn check_header(
    header: &[u8],
    file_len_found: u64,
    digest: &[u8; 32],
    key: &BlockHash,
    payload_len: usize,
) -> Result<(), Bad> {
    if header.len() < HEADER_LEN {
        return Err(Bad::Truncated);
    }
    if header[..8] != MAGIC {
        return Err(Bad::NotABlock);
    }
    let version = u32::from_le_bytes([header[8], header[9], header[10], header[11]]);
    if version != VERSION || header[12..44] != digest[..] {
        return Err(Bad::Foreign);
    }
    if header[44..76] != key.0 {
        return Err(Bad::WrongKey);
    }
    let mut len = [0u8; 8];
    len.copy_from_slice(&header[76..84]);
    if u64::from_le_bytes(len) != payload_len as u64 {
        return Err(Bad::Foreign);
    }
    match file_len_found.cmp(&file_len(payload_len)) {
        std::cmp::Ordering::Less => Err(Bad::Truncated),
        std::cmp::Ordering::Greater => Err(Bad::NotABlock),
        std::cmp::Ordering::Equal => Ok(()),
    }
}

/// Checks a whole file and returns its payload.
pub(crate) fn decode(
    mut file: Vec<u8>,
    digest: &[u8; 32],
    key: &BlockHash,
    payload_len: usize,
) -> Result<Vec<u8>, Bad> {
    check_header(&file, file.len() as u64, digest, key, payload_len)?;
    let body = file.len() - CHECKSUM_LEN;
    let mut sum = [0u8; 8];
    sum.copy_from_slice(&file[body..]);
    if checksum(&file[..body]) != u64::from_le_bytes(sum) {
        return Err(Bad::Corrupt);
    }
    file.truncate(body);
    file.drain(..HEADER_LEN);
    Ok(file)
}

/// `<hex key>.kvb`.
pub(crate) fn file_name(key: &BlockHash) -> String {
    let mut s = String::with_capacity(64 + 4);
    for b in key.0 {
        s.push_str(&format!("{b:02x}"));
    }
    s.push('.');
    s.push_str(SUFFIX);
    s
}

/// The key a block file's name carries, if it is one.
pub(crate) fn key_of_name(name: &str) -> Option<BlockHash> {
    let hex = name.strip_suffix(SUFFIX)?.strip_suffix('.')?;
    if hex.len() != 64 || !hex.is_ascii() {
        return None;
    }
    let mut key = [0u8; 32];
    for (i, k) in key.iter_mut().enumerate() {
        *k = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(BlockHash(key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_reads_back_and_any_damage_is_refused() {
        let (d, k) = ([3u8; 32], BlockHash([9; 32]));
        let payload: Vec<u8> = (0..100u8).collect();
        let f = encode(&d, &k, &payload);
        assert_eq!(decode(f.clone(), &d, &k, 100), Ok(payload));
        assert_eq!(
            decode(f[..f.len() - 1].to_vec(), &d, &k, 100),
            Err(Bad::Truncated)
        );
        let mut flipped = f.clone();
        flipped[HEADER_LEN + 5] ^= 1;
        assert_eq!(decode(flipped, &d, &k, 100), Err(Bad::Corrupt));
        assert_eq!(decode(f.clone(), &[4; 32], &k, 100), Err(Bad::Foreign));
        assert_eq!(decode(f, &d, &BlockHash([8; 32]), 100), Err(Bad::WrongKey));
        assert_eq!(key_of_name(&file_name(&k)), Some(k));
        assert_eq!(key_of_name("lock"), None);
    }
}
