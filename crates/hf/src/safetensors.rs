//! One `.safetensors` file over mmap: an 8-byte little-endian header length, a JSON header
//! naming each tensor's dtype, shape and byte range, then the data. Every range is checked
//! against the file at open, so a view never reads outside it.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use serde::Deserialize;

use crate::HfError;

/// Element types pagoda reads from checkpoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dtype {
    F32,
    F16,
    BF16,
}

impl Dtype {
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "F32" => Self::F32,
            "F16" => Self::F16,
            "BF16" => Self::BF16,
            _ => return None,
        })
    }

    pub fn size(self) -> usize {
        match self {
            Self::F32 => 4,
            Self::F16 | Self::BF16 => 2,
        }
    }
}

#[derive(Deserialize)]
struct HeaderEntry {
    dtype: String,
    shape: Vec<u64>,
    data_offsets: [u64; 2],
}

/// Where one tensor's bytes are in its file.
#[derive(Clone, Debug)]
struct Entry {
    dtype: Dtype,
    shape: Vec<usize>,
    start: usize,
    end: usize,
}

/// A borrowed tensor: its dtype, shape (outermost first, as PyTorch) and raw little-endian bytes.
#[derive(Clone, Copy, Debug)]
pub struct TensorView<'a> {
    pub dtype: Dtype,
    pub shape: &'a [usize],
    pub bytes: &'a [u8],
}

impl TensorView<'_> {
    pub fn n_elements(&self) -> usize {
        self.shape.iter().product()
    }

    /// The values as f32 (f16 and bf16 widen exactly).
    pub fn to_f32(&self) -> Vec<f32> {
        match self.dtype {
            Dtype::F32 => self
                .bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
            Dtype::F16 => self
                .bytes
                .chunks_exact(2)
                .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            Dtype::BF16 => self
                .bytes
                .chunks_exact(2)
                .map(|b| f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16))
                .collect(),
        }
    }
}

/// An open, checked safetensors file.
pub struct SafetensorsFile {
    path: PathBuf,
    map: Mmap,
    entries: HashMap<String, Entry>,
    /// Tensors of dtypes pagoda does not read (e.g. BERT's I64 `position_ids`), by name: an
    /// error only if a converter needs one.
    unsupported: HashMap<String, String>,
}

impl SafetensorsFile {
    pub fn open(path: &Path) -> Result<Self, HfError> {
        let io = |source| HfError::Io {
            path: path.to_owned(),
            source,
        };
        let bad = |message: String| HfError::BadFile {
            path: path.to_owned(),
            message,
        };
        let file = File::open(path).map_err(io)?;
        // SAFETY: read-only map; like every mmap loader we rely on the file not being truncated
        // while it is open.
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        let len = map.len();
        let header_len = map
            .get(..8)
            .map(|b| u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
            .ok_or_else(|| bad(format!("{len} bytes: too short for a header")))?;
        let data_start = usize::try_from(header_len)
            .ok()
            .and_then(|h| h.checked_add(8))
            .filter(|&s| s <= len)
            .ok_or_else(|| bad(format!("header of {header_len} bytes in a {len}-byte file")))?;
        let header: HashMap<String, serde_json::Value> =
            serde_json::from_slice(&map[8..data_start])
                .map_err(|e| bad(format!("header is not a JSON object: {e}")))?;
        let mut entries = HashMap::with_capacity(header.len());
        let mut unsupported = HashMap::new();
        for (name, value) in header {
            if name == "__metadata__" {
                continue;
            }
            let e: HeaderEntry =
                serde_json::from_value(value).map_err(|e| bad(format!("tensor {name}: {e}")))?;
            let Some(dtype) = Dtype::parse(&e.dtype) else {
                unsupported.insert(name, e.dtype);
                continue;
            };
            let shape: Vec<usize> = e
                .shape
                .iter()
                .map(|&d| usize::try_from(d).ok())
                .collect::<Option<_>>()
                .ok_or_else(|| bad(format!("tensor {name}: shape {:?}", e.shape)))?;
            let bytes = shape
                .iter()
                .try_fold(dtype.size(), |acc, &d| acc.checked_mul(d))
                .ok_or_else(|| bad(format!("tensor {name}: shape {shape:?} overflows")))?;
            let [begin, end] = e.data_offsets;
            let range = usize::try_from(begin)
                .ok()
                .zip(usize::try_from(end).ok())
                .and_then(|(b, e)| Some((data_start.checked_add(b)?, data_start.checked_add(e)?)))
                .filter(|&(b, e)| b <= e && e <= len && e - b == bytes)
                .ok_or_else(|| {
                    bad(format!(
                        "tensor {name}: data_offsets [{begin}, {end}] do not hold {bytes} bytes \
                         inside the file"
                    ))
                })?;
            entries.insert(
                name,
                Entry {
                    dtype,
                    shape,
                    start: range.0,
                    end: range.1,
                },
            );
        }
        Ok(Self {
            path: path.to_owned(),
            map,
            entries,
            unsupported,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }

    /// Names and dtypes of the tensors of dtypes pagoda does not read.
    pub fn unsupported(&self) -> impl Iterator<Item = (&str, &str)> {
        self.unsupported
            .iter()
            .map(|(n, d)| (n.as_str(), d.as_str()))
    }

    pub fn tensor(&self, name: &str) -> Option<TensorView<'_>> {
        self.entries.get(name).map(|e| TensorView {
            dtype: e.dtype,
            shape: &e.shape,
            bytes: &self.map[e.start..e.end],
        })
    }
}
