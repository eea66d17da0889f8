//! The pack cache file: a fixed header (magic, format version, the key of the model file and
//! packed layout it was made for), an index of the packed matrices, then their bytes, each
//! starting on a page. Every number is little-endian. Reading checks everything before any
//! byte is used: a stale, truncated, damaged or foreign file is an error, never a panic.
//!
//! ```text
//! 0   magic "PAGODAPK"            56  index_len u64 (bytes of the index, from 88)
//! 8   version u32                 64  file_len u64 (the whole file, to catch truncation)
//! 12  n_entries u32               72  index checksum u64
//! 16  key (40 bytes, `CacheKey`)  80  checksum of bytes 0..80 u64
//! 88  index: per entry name_len u32, name, ty u32, rows u64, cols u64, offset u64, len u64,
//!     checksum u64 (of the entry's data)
//!     data: entry bytes at their offsets, multiples of DATA_ALIGN after the index
//! ```

use std::collections::HashMap;
use std::ops::Range;

use pagoda_kernels::quant::GgmlType;

use super::PackCacheError;
use super::checksum::checksum;

const MAGIC: &[u8; 8] = b"PAGODAPK";
/// Bumped when the file layout (not the packed layout, which the key covers) changes.
pub(crate) const FORMAT_VERSION: u32 = 1;
/// Bytes of the fixed header.
pub(crate) const HEADER_BYTES: usize = 88;
/// Alignment of every entry's data in the file. A mapping starts on a page, so this is also
/// its alignment in memory, which covers the kernels' `PACKED_ALIGN`.
pub(crate) const DATA_ALIGN: usize = 4096;
/// Fixed bytes of one index entry besides its name.
const ENTRY_FIXED_BYTES: usize = 4 + 4 + 8 * 5;

const _: () = assert!(DATA_ALIGN.is_multiple_of(pagoda_kernels::quant::packed::PACKED_ALIGN));
// magic, version, n_entries, key, then index_len, file_len and the two checksums.
const _: () = assert!(HEADER_BYTES == 16 + CacheKey::BYTES + 4 * 8);

/// What a cache file is valid for: the model file as it was when packed, and the layout this
/// build's packer writes on this CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CacheKey {
    pub model_len: u64,
    pub mtime_secs: i64,
    pub mtime_nanos: u32,
    /// Inode of the model file where the platform has one (else 0): a model replaced by
    /// rename, even with its size and mtime preserved, is another file.
    pub inode: u64,
    /// `pagoda_kernels::quant::packed::layout_fingerprint`.
    pub layout: u64,
}

impl CacheKey {
    const BYTES: usize = 40;

    fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.model_len.to_le_bytes());
        out.extend_from_slice(&self.mtime_secs.to_le_bytes());
        out.extend_from_slice(&self.mtime_nanos.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&self.inode.to_le_bytes());
        out.extend_from_slice(&self.layout.to_le_bytes());
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, PackCacheError> {
        let key = Self {
            model_len: r.u64()?,
            mtime_secs: r.u64()? as i64,
            mtime_nanos: r.u32()?,
            inode: {
                r.u32()?; // reserved
                r.u64()?
            },
            layout: r.u64()?,
        };
        Ok(key)
    }
}

/// One packed matrix in the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    /// Where its bytes are in the file (in bounds, aligned to [`DATA_ALIGN`]).
    pub range: Range<usize>,
    pub checksum: u64,
}

/// A checked index: entries by matrix name.
#[derive(Debug)]
pub(crate) struct Index {
    pub entries: HashMap<String, Entry>,
}

/// The header and index of a cache holding `entries` (name, type, rows, cols, data length
/// and checksum, in file order), and where each entry's data goes. The data follows at those
/// offsets, zero-padded between entries; the file ends with the last entry.
pub(crate) fn layout(key: &CacheKey, entries: &[EntryMeta<'_>]) -> (Vec<u8>, Vec<Range<usize>>) {
    let index_len: usize = entries
        .iter()
        .map(|e| ENTRY_FIXED_BYTES + e.name.len())
        .sum();
    let mut at = (HEADER_BYTES + index_len).next_multiple_of(DATA_ALIGN);
    let ranges: Vec<Range<usize>> = entries
        .iter()
        .map(|e| {
            let r = at..at + e.len;
            at = r.end.next_multiple_of(DATA_ALIGN);
            r
        })
        .collect();
    let file_len = ranges.last().map_or(HEADER_BYTES + index_len, |r| r.end);
    let mut index = Vec::with_capacity(index_len);
    for (e, r) in entries.iter().zip(&ranges) {
        index.extend_from_slice(&(e.name.len() as u32).to_le_bytes());
        index.extend_from_slice(e.name.as_bytes());
        index.extend_from_slice(&e.ty.id().to_le_bytes());
        for v in [e.rows, e.cols, r.start, r.len()] {
            index.extend_from_slice(&(v as u64).to_le_bytes());
        }
        index.extend_from_slice(&e.checksum.to_le_bytes());
    }
    let mut head = Vec::with_capacity(HEADER_BYTES + index_len);
    head.extend_from_slice(MAGIC);
    head.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    head.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    key.write(&mut head);
    head.extend_from_slice(&(index_len as u64).to_le_bytes());
    head.extend_from_slice(&(file_len as u64).to_le_bytes());
    head.extend_from_slice(&checksum(&index).to_le_bytes());
    let header_sum = checksum(&head);
    head.extend_from_slice(&header_sum.to_le_bytes());
    debug_assert_eq!(head.len(), HEADER_BYTES);
    head.extend_from_slice(&index);
    (head, ranges)
}

/// What [`layout`] needs to know of one matrix.
pub(crate) struct EntryMeta<'a> {
    pub name: &'a str,
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    pub len: usize,
    pub checksum: u64,
}

/// Checks the header and index of the cache file `bytes` against `key`. `Stale` when the file
/// is a sound cache for another model file, layout or format version; `Invalid` when it is
/// not a sound cache at all. Entry data is bounds-checked here and checksummed by the caller.
pub(crate) fn read_index(bytes: &[u8], key: &CacheKey) -> Result<Index, PackCacheError> {
    let mut r = Reader { bytes, at: 0 };
    if r.take(MAGIC.len())? != MAGIC {
        return Err(invalid("not a pagoda pack cache (bad magic)"));
    }
    let version = r.u32()?;
    let header = bytes
        .get(..HEADER_BYTES)
        .ok_or_else(|| invalid("truncated header"))?;
    let (head, sum) = header.split_at(HEADER_BYTES - 8);
    if checksum(head).to_le_bytes() != sum {
        return Err(invalid("header checksum mismatch"));
    }
    if version != FORMAT_VERSION {
        return Err(PackCacheError::Stale(format!(
            "format version {version}, this build reads {FORMAT_VERSION}"
        )));
    }
    let n_entries = r.u32()? as usize;
    let found = CacheKey::read(&mut r)?;
    if found != *key {
        return Err(PackCacheError::Stale(stale_reason(&found, key)));
    }
    let index_len = r.usize()?;
    let file_len = r.usize()?;
    let index_sum = r.u64()?;
    if file_len != bytes.len() {
        return Err(invalid(format!(
            "{} bytes, its header says {file_len} (truncated?)",
            bytes.len()
        )));
    }
    r.u64()?; // the header checksum, checked above
    let index = r.take(index_len)?;
    if checksum(index) != index_sum {
        return Err(invalid("index checksum mismatch"));
    }
    let data_start = r.at;
    let mut r = Reader {
        bytes: index,
        at: 0,
    };
    // Each entry takes at least ENTRY_FIXED_BYTES, so a huge count fails on the first
    // missing byte; cap the allocation by what the index can hold.
    let mut entries = HashMap::with_capacity(n_entries.min(index_len / ENTRY_FIXED_BYTES));
    for i in 0..n_entries {
        let name_len = r.u32()? as usize;
        let name = std::str::from_utf8(r.take(name_len)?)
            .map_err(|_| invalid(format!("entry {i}: name is not UTF-8")))?
            .to_owned();
        let ty_id = r.u32()?;
        let ty = GgmlType::from_id(ty_id)
            .ok_or_else(|| invalid(format!("entry {i} (`{name}`): unknown type {ty_id}")))?;
        let (rows, cols, offset, len) = (r.usize()?, r.usize()?, r.usize()?, r.usize()?);
        let checksum = r.u64()?;
        let end = offset
            .checked_add(len)
            .filter(|&end| offset >= data_start && end <= bytes.len())
            .ok_or_else(|| invalid(format!("entry `{name}`: data out of bounds")))?;
        if !offset.is_multiple_of(DATA_ALIGN) {
            return Err(invalid(format!("entry `{name}`: data not aligned")));
        }
        let entry = Entry {
            ty,
            rows,
            cols,
            range: offset..end,
            checksum,
        };
        if entries.insert(name.clone(), entry).is_some() {
            return Err(invalid(format!("entry `{name}` appears twice")));
        }
    }
    if r.at != index.len() {
        return Err(invalid("index has trailing bytes"));
    }
    Ok(Index { entries })
}

fn stale_reason(found: &CacheKey, want: &CacheKey) -> String {
    if found.layout != want.layout {
        "packed by another build or CPU (layout differs)".to_owned()
    } else {
        format!(
            "made for another model file (size {} mtime {}.{:09} inode {}, now size {} mtime {}.{:09} inode {})",
            found.model_len,
            found.mtime_secs,
            found.mtime_nanos,
            found.inode,
            want.model_len,
            want.mtime_secs,
            want.mtime_nanos,
            want.inode
        )
    }
}

fn invalid(reason: impl Into<String>) -> PackCacheError {
    PackCacheError::Invalid(reason.into())
}

/// A cursor whose reads fail, instead of panicking, past the end.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], PackCacheError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or_else(|| invalid(format!("truncated at byte {}", self.at)))?;
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], PackCacheError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    fn u32(&mut self) -> Result<u32, PackCacheError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    fn u64(&mut self) -> Result<u64, PackCacheError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    fn usize(&mut self) -> Result<usize, PackCacheError> {
        usize::try_from(self.u64()?).map_err(|_| invalid("a size does not fit this platform"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> CacheKey {
        CacheKey {
            model_len: 1234,
            mtime_secs: 1_700_000_000,
            mtime_nanos: 5,
            inode: 42,
            layout: 0xfeed,
        }
    }

    /// A file of two entries, with bytes `1..` and `2..` as data.
    fn file() -> Vec<u8> {
        let metas = [
            EntryMeta {
                name: "a.weight",
                ty: GgmlType::Q8_0,
                rows: 8,
                cols: 32,
                len: 272,
                checksum: checksum(&[1; 272]),
            },
            EntryMeta {
                name: "b.weight+c.weight",
                ty: GgmlType::Q4_K,
                rows: 16,
                cols: 256,
                len: 5000,
                checksum: checksum(&[2; 5000]),
            },
        ];
        let (mut out, ranges) = layout(&key(), &metas);
        for (r, fill) in ranges.iter().zip([1u8, 2]) {
            out.resize(r.start, 0);
            out.resize(r.end, fill);
        }
        out
    }

    #[test]
    fn a_written_index_reads_back() {
        let f = file();
        let index = read_index(&f, &key()).unwrap_or_else(|e| panic!("{e}"));
        let a = &index.entries["a.weight"];
        assert_eq!((a.ty, a.rows, a.cols), (GgmlType::Q8_0, 8, 32));
        assert_eq!(a.range, DATA_ALIGN..DATA_ALIGN + 272);
        assert_eq!(a.checksum, checksum(&f[a.range.clone()]));
        let b = &index.entries["b.weight+c.weight"];
        assert_eq!(b.range, 2 * DATA_ALIGN..2 * DATA_ALIGN + 5000);
        assert_eq!(f.len(), b.range.end);
        assert_eq!(b.checksum, checksum(&f[b.range.clone()]));
    }

    #[test]
    fn another_key_is_stale() {
        let f = file();
        for k in [
            CacheKey {
                model_len: 1235,
                ..key()
            },
            CacheKey {
                mtime_nanos: 6,
                ..key()
            },
            CacheKey { inode: 1, ..key() },
            CacheKey { layout: 1, ..key() },
        ] {
            assert!(
                matches!(read_index(&f, &k), Err(PackCacheError::Stale(_))),
                "{k:?}"
            );
        }
    }

    #[test]
    fn every_truncation_and_every_flipped_header_or_index_byte_is_an_error() {
        let f = file();
        let index_end = HEADER_BYTES
            + ["a.weight", "b.weight+c.weight"]
                .iter()
                .map(|n| ENTRY_FIXED_BYTES + n.len())
                .sum::<usize>();
        for len in (0..index_end + 10).chain([f.len() - 1]) {
            assert!(read_index(&f[..len], &key()).is_err(), "truncated to {len}");
        }
        for at in 0..index_end {
            let mut g = f.clone();
            g[at] ^= 0x10;
            assert!(read_index(&g, &key()).is_err(), "byte {at} flipped");
        }
        let mut longer = f.clone();
        longer.push(0);
        assert!(read_index(&longer, &key()).is_err(), "a byte appended");
    }

    #[test]
    fn garbage_is_invalid_not_a_panic() {
        for g in [&b""[..], b"GGUF\x03\0\0\0", &[0xff; 200], b"PAGODAPK"] {
            assert!(matches!(
                read_index(g, &key()),
                Err(PackCacheError::Invalid(_))
            ));
        }
    }
}
