//! `GgufFile`: parses header, metadata and tensor infos of a mapped (or owned) GGUF file once, and
//! then serves metadata and zero-copy tensor data. Layout per ggml `docs/gguf.md`: magic, version,
//! tensor count, kv count, kvs, tensor infos, padding to the alignment, tensor data.

use std::collections::HashMap;
use std::fs::File;
use std::path::Path;

use memmap2::Mmap;

use crate::GgufError;
use crate::metadata::{MetaValue, read_value};
use crate::reader::{Reader, ShortExt};
use crate::tensor::{TensorInfo, place_tensors, read_tensor_info};

/// Alignment of tensor data when the file has no `general.alignment` (ggml `GGUF_DEFAULT_ALIGNMENT`).
pub const DEFAULT_ALIGNMENT: usize = 32;

const MAGIC: &[u8; 4] = b"GGUF";
pub(crate) const ALIGNMENT_KEY: &str = "general.alignment";

/// Fewest bytes of one metadata entry: u64 key length, u32 value type, a 1-byte value.
const MIN_KV_BYTES: u64 = 8 + 4 + 1;
/// Fewest bytes of one tensor info: u64 name length, u32 n_dims, one u64 dim, u32 type, u64 offset.
const MIN_TENSOR_INFO_BYTES: u64 = 8 + 4 + 8 + 4 + 8;

enum Storage {
    Mapped(Mmap),
    Owned(Vec<u8>),
}

impl Storage {
    fn bytes(&self) -> &[u8] {
        match self {
            Self::Mapped(m) => m,
            Self::Owned(v) => v,
        }
    }
}

/// An open GGUF file (version 2 or 3). Immutable after open, so `Send + Sync`.
pub struct GgufFile {
    storage: Storage,
    version: u32,
    pub(crate) metadata: Vec<(String, MetaValue)>,
    key_index: HashMap<String, usize>,
    alignment: usize,
    data_offset: u64,
    tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("version", &self.version)
            .field("file_len", &self.file_len())
            .field("metadata_entries", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .field("alignment", &self.alignment)
            .finish_non_exhaustive()
    }
}

/// What parsing extracts; the bytes stay where they are.
struct Parsed {
    version: u32,
    metadata: Vec<(String, MetaValue)>,
    key_index: HashMap<String, usize>,
    alignment: usize,
    data_offset: u64,
    tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
}

impl GgufFile {
    /// Map the file at `path` and parse it.
    pub fn open(path: &Path) -> Result<Self, GgufError> {
        let io_err = |source| GgufError::Io {
            path: path.to_owned(),
            source,
        };
        let file = File::open(path).map_err(io_err)?;
        let len = file.metadata().map_err(io_err)?.len();
        let storage = if len == 0 {
            // Mapping zero bytes fails on some platforms; an empty file is simply truncated.
            Storage::Owned(Vec::new())
        } else {
            // SAFETY: the map is read-only. Like every mmap-based loader (llama.cpp included) we
            // rely on the file not being truncated or rewritten while it is open.
            Storage::Mapped(unsafe { Mmap::map(&file) }.map_err(io_err)?)
        };
        Self::from_storage(storage)
    }

    /// Parse a GGUF file held in memory (tests, fuzzing).
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self, GgufError> {
        Self::from_storage(Storage::Owned(bytes))
    }

    /// A file built by [`crate::GgufAssembly`]: the data section is the whole buffer.
    pub(crate) fn assembled(
        metadata: Vec<(String, MetaValue)>,
        key_index: HashMap<String, usize>,
        tensors: Vec<TensorInfo>,
        data: Vec<u8>,
    ) -> Self {
        let tensor_index = tensors
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        Self {
            storage: Storage::Owned(data),
            version: 3,
            metadata,
            key_index,
            alignment: DEFAULT_ALIGNMENT,
            data_offset: 0,
            tensors,
            tensor_index,
        }
    }

    fn from_storage(storage: Storage) -> Result<Self, GgufError> {
        let p = parse(storage.bytes())?;
        Ok(Self {
            storage,
            version: p.version,
            metadata: p.metadata,
            key_index: p.key_index,
            alignment: p.alignment,
            data_offset: p.data_offset,
            tensors: p.tensors,
            tensor_index: p.tensor_index,
        })
    }

    pub fn version(&self) -> u32 {
        self.version
    }

    /// All metadata entries, in file order.
    pub fn metadata(&self) -> impl Iterator<Item = (&str, &MetaValue)> {
        self.metadata.iter().map(|(k, v)| (k.as_str(), v))
    }

    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.key_index.get(key).map(|&i| &self.metadata[i].1)
    }

    /// Alignment of tensor data: `general.alignment`, else [`DEFAULT_ALIGNMENT`].
    pub fn alignment(&self) -> usize {
        self.alignment
    }

    /// Absolute offset of the tensor data section.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// Length of the whole file in bytes.
    pub fn file_len(&self) -> u64 {
        self.storage.bytes().len() as u64
    }

    /// All tensor infos, in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }

    /// The bytes of tensor `t`, borrowed from the map. The range was checked at open; a
    /// `TensorInfo` from another file that does not fit this one gives an empty slice.
    /// Through [`GgufFile::open`] the slice is aligned in memory to [`GgufFile::alignment`] (the
    /// map starts on a page); through `from_bytes` only as far as the `Vec`'s buffer is.
    pub fn tensor_data(&self, t: &TensorInfo) -> &[u8] {
        let start = usize::try_from(t.offset).unwrap_or(usize::MAX);
        let bytes = start
            .checked_add(t.size)
            .and_then(|end| self.storage.bytes().get(start..end));
        debug_assert!(bytes.is_some(), "tensor {} not in this file", t.name);
        bytes.unwrap_or(&[])
    }
}

fn parse(bytes: &[u8]) -> Result<Parsed, GgufError> {
    let mut r = Reader::new(bytes);
    let version = read_header(&mut r)?;

    let tensor_count = r.u64().ctx(|| "header: tensor count".to_owned())?;
    let kv_count = r.u64().ctx(|| "header: metadata count".to_owned())?;
    check_count(&r, kv_count, MIN_KV_BYTES, "metadata entries")?;

    let (metadata, key_index) = read_metadata(&mut r, kv_count)?;
    let alignment = alignment_of(&metadata, &key_index)?;

    check_count(&r, tensor_count, MIN_TENSOR_INFO_BYTES, "tensor infos")?;
    // Bounded by check_count: each info takes at least MIN_TENSOR_INFO_BYTES of the file.
    let mut raw = Vec::with_capacity(tensor_count as usize);
    let mut tensor_index = HashMap::with_capacity(tensor_count as usize);
    for i in 0..tensor_count {
        let t = read_tensor_info(&mut r, i)?;
        if tensor_index
            .insert(t.info.name.clone(), raw.len())
            .is_some()
        {
            return Err(GgufError::DuplicateTensor(t.info.name));
        }
        raw.push(t);
    }

    let file_len = bytes.len() as u64;
    let data_offset = align_up(r.position() as u64, alignment);
    let tensors = place_tensors(raw, data_offset, alignment, file_len)?;
    Ok(Parsed {
        version,
        metadata,
        key_index,
        alignment,
        data_offset,
        tensors,
        tensor_index,
    })
}

/// Magic and version; returns the version (2 or 3).
fn read_header(r: &mut Reader<'_>) -> Result<u32, GgufError> {
    let magic = match r.take(4) {
        Ok(m) => m,
        Err(short) => {
            let have = &MAGIC[..r.remaining()];
            let found = r.take(r.remaining() as u64).unwrap_or_default();
            if found != have {
                return Err(GgufError::BadMagic {
                    found: found.to_vec(),
                });
            }
            return Err(short.context("header: magic".to_owned()));
        }
    };
    if magic != MAGIC {
        return Err(GgufError::BadMagic {
            found: magic.to_vec(),
        });
    }
    let version = r.u32().ctx(|| "header: version".to_owned())?;
    match version {
        2 | 3 => Ok(version),
        // A big-endian file reads its version byte-swapped (ggml gguf.cpp checks the same way).
        v if (1..=3).contains(&v.swap_bytes()) => Err(GgufError::BigEndian(v.swap_bytes())),
        v => Err(GgufError::UnsupportedVersion(v)),
    }
}

/// Fail unless `count` items of at least `min_bytes` each fit in the bytes left.
fn check_count(r: &Reader<'_>, count: u64, min_bytes: u64, what: &str) -> Result<(), GgufError> {
    let needed = u128::from(count) * u128::from(min_bytes);
    let available = r.remaining() as u64;
    if needed > u128::from(available) {
        return Err(GgufError::CountTooLarge {
            context: "header".to_owned(),
            what: format!("a count of {count} {what}"),
            needed,
            available,
        });
    }
    Ok(())
}

type Metadata = (Vec<(String, MetaValue)>, HashMap<String, usize>);

fn read_metadata(r: &mut Reader<'_>, kv_count: u64) -> Result<Metadata, GgufError> {
    // Bounded by check_count: each entry takes at least MIN_KV_BYTES of the file.
    let mut metadata = Vec::with_capacity(kv_count as usize);
    let mut key_index = HashMap::with_capacity(kv_count as usize);
    for i in 0..kv_count {
        let key = r.string("key name", || format!("metadata entry #{i}"))?;
        let context = || format!("metadata key '{key}'");
        let type_id = r.u32().ctx(|| format!("{}: value type", context()))?;
        let value = read_value(r, type_id, &context)?;
        if key_index.contains_key(&key) {
            return Err(GgufError::DuplicateKey(key));
        }
        key_index.insert(key.clone(), metadata.len());
        metadata.push((key, value));
    }
    Ok((metadata, key_index))
}

fn alignment_of(
    metadata: &[(String, MetaValue)],
    key_index: &HashMap<String, usize>,
) -> Result<usize, GgufError> {
    let Some(&i) = key_index.get(ALIGNMENT_KEY) else {
        return Ok(DEFAULT_ALIGNMENT);
    };
    match &metadata[i].1 {
        MetaValue::U32(a) if a.is_power_of_two() => Ok(*a as usize),
        MetaValue::U32(a) => Err(GgufError::BadAlignment {
            found: a.to_string(),
        }),
        other => Err(GgufError::BadAlignment {
            found: format!("a {} value", other.type_name()),
        }),
    }
}

/// `offset` rounded up to a multiple of `alignment` (a power of two at most 2^31), saturating:
/// a saturated offset lies past the end of any file and fails the tensor bounds check.
fn align_up(offset: u64, alignment: usize) -> u64 {
    let a = alignment as u64;
    offset.checked_add(a - 1).map_or(u64::MAX, |v| v & !(a - 1))
}
