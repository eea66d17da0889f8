//! A GGUF v3/v2 writer for tests: any metadata value (nested arrays included), tensors with given
//! name, dims, type and bytes, alignment honoured. It records the byte offset of every section so
//! tests can corrupt one field at a time. Layout per ggml `docs/gguf.md`.

use std::io;
use std::ops::Range;
use std::path::Path;

use pagoda_kernels::quant::GgmlType;

/// GGUF metadata value type ids (ggml gguf.cpp `enum gguf_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueType {
    U8 = 0,
    I8 = 1,
    U16 = 2,
    I16 = 3,
    U32 = 4,
    I32 = 5,
    F32 = 6,
    Bool = 7,
    String = 8,
    Array = 9,
    U64 = 10,
    I64 = 11,
    F64 = 12,
}

impl ValueType {
    pub fn id(self) -> u32 {
        self as u32
    }
}

/// A metadata value to write. An array's items are written as given, without checking that
/// they match the declared element type, so tests can write malformed arrays too.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
    String(String),
    Array(ValueType, Vec<Value>),
}

impl Value {
    pub fn str(s: &str) -> Self {
        Self::String(s.to_owned())
    }

    pub fn str_array<S: AsRef<str>>(items: impl IntoIterator<Item = S>) -> Self {
        Self::Array(
            ValueType::String,
            items.into_iter().map(|s| Self::str(s.as_ref())).collect(),
        )
    }

    pub fn f32_array(items: impl IntoIterator<Item = f32>) -> Self {
        Self::Array(ValueType::F32, items.into_iter().map(Self::F32).collect())
    }

    pub fn i32_array(items: impl IntoIterator<Item = i32>) -> Self {
        Self::Array(ValueType::I32, items.into_iter().map(Self::I32).collect())
    }

    pub fn value_type(&self) -> ValueType {
        match self {
            Self::U8(_) => ValueType::U8,
            Self::I8(_) => ValueType::I8,
            Self::U16(_) => ValueType::U16,
            Self::I16(_) => ValueType::I16,
            Self::U32(_) => ValueType::U32,
            Self::I32(_) => ValueType::I32,
            Self::U64(_) => ValueType::U64,
            Self::I64(_) => ValueType::I64,
            Self::F32(_) => ValueType::F32,
            Self::F64(_) => ValueType::F64,
            Self::Bool(_) => ValueType::Bool,
            Self::String(_) => ValueType::String,
            Self::Array(..) => ValueType::Array,
        }
    }

    /// The value without its type id (an array: element type, count, items).
    fn write_payload(&self, out: &mut Vec<u8>) {
        match self {
            Self::U8(v) => out.push(*v),
            Self::I8(v) => out.extend_from_slice(&v.to_le_bytes()),
            Self::U16(v) => out.extend_from_slice(&v.to_le_bytes()),
            Self::I16(v) => out.extend_from_slice(&v.to_le_bytes()),
            Self::U32(v) => out.extend_from_slice(&v.to_le_bytes()),
            Self::I32(v) => out.extend_from_slice(&v.to_le_bytes()),
            Self::U64(v) => out.extend_from_slice(&v.to_le_bytes()),
            Self::I64(v) => out.extend_from_slice(&v.to_le_bytes()),
            Self::F32(v) => out.extend_from_slice(&v.to_le_bytes()),
            Self::F64(v) => out.extend_from_slice(&v.to_le_bytes()),
            Self::Bool(v) => out.push(u8::from(*v)),
            Self::String(s) => write_string(out, s),
            Self::Array(elem, items) => {
                out.extend_from_slice(&elem.id().to_le_bytes());
                out.extend_from_slice(&(items.len() as u64).to_le_bytes());
                for item in items {
                    item.write_payload(out);
                }
            }
        }
    }
}

impl From<u32> for Value {
    fn from(v: u32) -> Self {
        Self::U32(v)
    }
}

impl From<f32> for Value {
    fn from(v: f32) -> Self {
        Self::F32(v)
    }
}

impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Self::Bool(v)
    }
}

impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Self::str(v)
    }
}

/// A tensor to write. `type_id` is raw so tests can write unknown ids; `data` is written as is
/// (its length need not match the dims).
#[derive(Clone, Debug, PartialEq)]
pub struct TensorSpec {
    pub name: String,
    pub dims: Vec<u64>,
    pub type_id: u32,
    pub data: Vec<u8>,
}

/// Where each part of a written file lies (byte offsets into `to_bytes()`).
#[derive(Clone, Debug, Default)]
pub struct Layout {
    pub version: usize,
    pub tensor_count: usize,
    pub kv_count: usize,
    pub kvs: Vec<KvLayout>,
    pub tensor_infos: Vec<TensorInfoLayout>,
    /// Start of the data section (after padding to the alignment).
    pub data_offset: usize,
    /// Absolute byte range of each tensor's data.
    pub tensor_data: Vec<Range<usize>>,
}

#[derive(Clone, Debug)]
pub struct KvLayout {
    pub key: String,
    /// The key's u64 length.
    pub start: usize,
    /// The u32 value type.
    pub value_type: usize,
    /// The value payload (for an array: its element type, then count at +4, items at +12).
    pub value: usize,
    pub end: usize,
}

#[derive(Clone, Debug)]
pub struct TensorInfoLayout {
    pub name: String,
    /// The name's u64 length.
    pub start: usize,
    pub n_dims: usize,
    /// First u64 dim.
    pub dims: usize,
    pub type_id: usize,
    /// The u64 data offset (relative to the data section).
    pub offset: usize,
    pub end: usize,
}

/// Builds a GGUF file in memory.
#[derive(Clone, Debug)]
pub struct GgufWriter {
    version: u32,
    alignment: usize,
    kvs: Vec<(String, Value)>,
    tensors: Vec<TensorSpec>,
    tensor_count_override: Option<u64>,
    kv_count_override: Option<u64>,
}

impl Default for GgufWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl GgufWriter {
    /// An empty v3 file with the default alignment 32.
    pub fn new() -> Self {
        Self {
            version: 3,
            alignment: 32,
            kvs: Vec::new(),
            tensors: Vec::new(),
            tensor_count_override: None,
            kv_count_override: None,
        }
    }

    /// Header version (2 and 3 share a layout; other values make invalid files).
    pub fn version(mut self, version: u32) -> Self {
        self.version = version;
        self
    }

    /// Add `general.alignment = alignment` (u32) here in the metadata order, and align data to it.
    pub fn alignment(mut self, alignment: u32) -> Self {
        self.alignment = alignment.max(1) as usize;
        self.kv("general.alignment", Value::U32(alignment))
    }

    /// Lay data out at `alignment` without writing `general.alignment` (for mismatch tests).
    pub fn layout_alignment(mut self, alignment: usize) -> Self {
        self.alignment = alignment.max(1);
        self
    }

    pub fn kv(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.kvs.push((key.to_owned(), value.into()));
        self
    }

    /// A tensor of type `ty` with the given bytes.
    pub fn tensor(self, name: &str, dims: &[u64], ty: GgmlType, data: Vec<u8>) -> Self {
        self.tensor_raw(TensorSpec {
            name: name.to_owned(),
            dims: dims.to_vec(),
            type_id: ty.id(),
            data,
        })
    }

    /// A tensor of type `ty` whose bytes are a simple counting pattern of the right length.
    pub fn tensor_patterned(self, name: &str, dims: &[u64], ty: GgmlType) -> Self {
        let len = tensor_bytes(dims, ty);
        let data = (0..len).map(|i| (i * 7 + name.len()) as u8).collect();
        self.tensor(name, dims, ty, data)
    }

    pub fn tensor_raw(mut self, spec: TensorSpec) -> Self {
        self.tensors.push(spec);
        self
    }

    /// The tensors added so far, in order.
    pub fn tensors(&self) -> &[TensorSpec] {
        &self.tensors
    }

    /// The value last set for metadata `key`.
    pub fn value(&self, key: &str) -> Option<&Value> {
        self.kvs
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    }

    /// Write this tensor count in the header instead of the real one.
    pub fn tensor_count_override(mut self, count: u64) -> Self {
        self.tensor_count_override = Some(count);
        self
    }

    /// Write this metadata count in the header instead of the real one.
    pub fn kv_count_override(mut self, count: u64) -> Self {
        self.kv_count_override = Some(count);
        self
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        self.build().0
    }

    pub fn write_to(&self, path: &Path) -> io::Result<()> {
        std::fs::write(path, self.to_bytes())
    }

    /// The file bytes and where each part lies. Tensor data is placed in order, each at the next
    /// aligned offset; there is no padding after the last tensor, so the file ends with its data.
    pub fn build(&self) -> (Vec<u8>, Layout) {
        let mut out = Vec::new();
        let mut layout = Layout::default();
        out.extend_from_slice(b"GGUF");
        layout.version = out.len();
        out.extend_from_slice(&self.version.to_le_bytes());
        layout.tensor_count = out.len();
        let tensor_count = self
            .tensor_count_override
            .unwrap_or(self.tensors.len() as u64);
        out.extend_from_slice(&tensor_count.to_le_bytes());
        layout.kv_count = out.len();
        let kv_count = self.kv_count_override.unwrap_or(self.kvs.len() as u64);
        out.extend_from_slice(&kv_count.to_le_bytes());

        for (key, value) in &self.kvs {
            let start = out.len();
            write_string(&mut out, key);
            let value_type = out.len();
            out.extend_from_slice(&value.value_type().id().to_le_bytes());
            let value_at = out.len();
            value.write_payload(&mut out);
            layout.kvs.push(KvLayout {
                key: key.clone(),
                start,
                value_type,
                value: value_at,
                end: out.len(),
            });
        }

        let mut relative = 0usize;
        let mut relative_offsets = Vec::with_capacity(self.tensors.len());
        for t in &self.tensors {
            relative_offsets.push(relative);
            relative = align_up(relative + t.data.len(), self.alignment);
        }
        for (t, &rel) in self.tensors.iter().zip(&relative_offsets) {
            let start = out.len();
            write_string(&mut out, &t.name);
            let n_dims = out.len();
            out.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            let dims = out.len();
            for d in &t.dims {
                out.extend_from_slice(&d.to_le_bytes());
            }
            let type_id = out.len();
            out.extend_from_slice(&t.type_id.to_le_bytes());
            let offset = out.len();
            out.extend_from_slice(&(rel as u64).to_le_bytes());
            layout.tensor_infos.push(TensorInfoLayout {
                name: t.name.clone(),
                start,
                n_dims,
                dims,
                type_id,
                offset,
                end: out.len(),
            });
        }

        if !self.tensors.is_empty() {
            out.resize(align_up(out.len(), self.alignment), 0);
        }
        layout.data_offset = out.len();
        for (t, &rel) in self.tensors.iter().zip(&relative_offsets) {
            let start = layout.data_offset + rel;
            out.resize(start, 0);
            out.extend_from_slice(&t.data);
            layout.tensor_data.push(start..out.len());
        }
        (out, layout)
    }
}

/// Bytes of a tensor of `dims` and type `ty` (ne0 must be a whole number of blocks).
pub fn tensor_bytes(dims: &[u64], ty: GgmlType) -> usize {
    let n: u64 = dims.iter().product();
    (n as usize / ty.block_size()) * ty.type_size()
}

/// Overwrite the little-endian u32 at `at`.
pub fn patch_u32(bytes: &mut [u8], at: usize, value: u32) {
    bytes[at..at + 4].copy_from_slice(&value.to_le_bytes());
}

/// Overwrite the little-endian u64 at `at`.
pub fn patch_u64(bytes: &mut [u8], at: usize, value: u64) {
    bytes[at..at + 8].copy_from_slice(&value.to_le_bytes());
}

fn write_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn align_up(n: usize, alignment: usize) -> usize {
    n.div_ceil(alignment) * alignment
}
