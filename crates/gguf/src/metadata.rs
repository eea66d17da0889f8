//! GGUF metadata values: the 13 value types, arrays as typed vectors (a 262144-entry token list is
//! one `Vec<String>`, not 262144 tagged values), and their bounded parsing.
//! Type ids follow ggml `gguf.cpp` `enum gguf_type` (UINT8 = 0 .. FLOAT64 = 12).

use crate::GgufError;
use crate::reader::{Reader, ShortExt};

/// Deepest array nesting accepted. Real files use depth 1; the bound keeps recursion (and stack
/// use) small on hostile input.
pub const MAX_ARRAY_DEPTH: usize = 16;

/// One metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum MetaValue {
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
    Array(MetaArray),
}

/// A metadata array: all elements share one type, so each type is its own vector. Nested arrays
/// may each have a different element type.
#[derive(Debug, Clone, PartialEq)]
pub enum MetaArray {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F32(Vec<f32>),
    F64(Vec<f64>),
    Bool(Vec<bool>),
    Str(Vec<String>),
    Array(Vec<MetaArray>),
}

impl MetaValue {
    /// The GGUF name of the value's type, for error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::U8(_) => "u8",
            Self::I8(_) => "i8",
            Self::U16(_) => "u16",
            Self::I16(_) => "i16",
            Self::U32(_) => "u32",
            Self::I32(_) => "i32",
            Self::U64(_) => "u64",
            Self::I64(_) => "i64",
            Self::F32(_) => "f32",
            Self::F64(_) => "f64",
            Self::Bool(_) => "bool",
            Self::String(_) => "string",
            Self::Array(a) => a.type_name(),
        }
    }

    /// The value as a signed 128-bit integer when it is of any integer type.
    pub fn as_integer(&self) -> Option<i128> {
        Some(match *self {
            Self::U8(v) => v.into(),
            Self::I8(v) => v.into(),
            Self::U16(v) => v.into(),
            Self::I16(v) => v.into(),
            Self::U32(v) => v.into(),
            Self::I32(v) => v.into(),
            Self::U64(v) => v.into(),
            Self::I64(v) => v.into(),
            _ => return None,
        })
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Self::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&MetaArray> {
        match self {
            Self::Array(a) => Some(a),
            _ => None,
        }
    }
}

impl MetaArray {
    /// Number of elements (of the outer array, for nested arrays).
    pub fn len(&self) -> usize {
        match self {
            Self::U8(v) => v.len(),
            Self::I8(v) => v.len(),
            Self::U16(v) => v.len(),
            Self::I16(v) => v.len(),
            Self::U32(v) => v.len(),
            Self::I32(v) => v.len(),
            Self::U64(v) => v.len(),
            Self::I64(v) => v.len(),
            Self::F32(v) => v.len(),
            Self::F64(v) => v.len(),
            Self::Bool(v) => v.len(),
            Self::Str(v) => v.len(),
            Self::Array(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// "array of <element type>", for error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::U8(_) => "array of u8",
            Self::I8(_) => "array of i8",
            Self::U16(_) => "array of u16",
            Self::I16(_) => "array of i16",
            Self::U32(_) => "array of u32",
            Self::I32(_) => "array of i32",
            Self::U64(_) => "array of u64",
            Self::I64(_) => "array of i64",
            Self::F32(_) => "array of f32",
            Self::F64(_) => "array of f64",
            Self::Bool(_) => "array of bool",
            Self::Str(_) => "array of string",
            Self::Array(_) => "array of array",
        }
    }
}

// GGUF value type ids (ggml gguf.cpp `enum gguf_type`).
const T_U8: u32 = 0;
const T_I8: u32 = 1;
const T_U16: u32 = 2;
const T_I16: u32 = 3;
const T_U32: u32 = 4;
const T_I32: u32 = 5;
const T_F32: u32 = 6;
const T_BOOL: u32 = 7;
const T_STRING: u32 = 8;
const T_ARRAY: u32 = 9;
const T_U64: u32 = 10;
const T_I64: u32 = 11;
const T_F64: u32 = 12;

/// The fewest bytes one element of `type_id` occupies (a string is at least its u64 length, an
/// array at least its u32 type and u64 count), or `None` for an unknown type.
fn min_element_bytes(type_id: u32) -> Option<(u64, &'static str)> {
    Some(match type_id {
        T_U8 => (1, "u8"),
        T_I8 => (1, "i8"),
        T_U16 => (2, "u16"),
        T_I16 => (2, "i16"),
        T_U32 => (4, "u32"),
        T_I32 => (4, "i32"),
        T_F32 => (4, "f32"),
        T_BOOL => (1, "bool"),
        T_STRING => (8, "string"),
        T_ARRAY => (12, "array"),
        T_U64 => (8, "u64"),
        T_I64 => (8, "i64"),
        T_F64 => (8, "f64"),
        _ => return None,
    })
}

fn read_bool(r: &mut Reader<'_>, context: &dyn Fn() -> String) -> Result<bool, GgufError> {
    match r.u8().ctx(|| format!("{}: bool", context()))? {
        0 => Ok(false),
        1 => Ok(true),
        byte => Err(GgufError::BadBool {
            context: context(),
            byte,
        }),
    }
}

/// Read one value of `type_id`. `context` names the key ("metadata key 'x'").
pub(crate) fn read_value(
    r: &mut Reader<'_>,
    type_id: u32,
    context: &dyn Fn() -> String,
) -> Result<MetaValue, GgufError> {
    let what = || format!("{}: value", context());
    Ok(match type_id {
        T_U8 => MetaValue::U8(r.u8().ctx(what)?),
        T_I8 => MetaValue::I8(r.i8().ctx(what)?),
        T_U16 => MetaValue::U16(r.u16().ctx(what)?),
        T_I16 => MetaValue::I16(r.i16().ctx(what)?),
        T_U32 => MetaValue::U32(r.u32().ctx(what)?),
        T_I32 => MetaValue::I32(r.i32().ctx(what)?),
        T_U64 => MetaValue::U64(r.u64().ctx(what)?),
        T_I64 => MetaValue::I64(r.i64().ctx(what)?),
        T_F32 => MetaValue::F32(r.f32().ctx(what)?),
        T_F64 => MetaValue::F64(r.f64().ctx(what)?),
        T_BOOL => MetaValue::Bool(read_bool(r, context)?),
        T_STRING => MetaValue::String(r.string("string value", context)?),
        T_ARRAY => MetaValue::Array(read_array(r, context, 1)?),
        _ => {
            return Err(GgufError::UnknownValueType {
                context: context(),
                type_id,
            });
        }
    })
}

/// Decode `bytes` (already bounds-checked, a whole number of `N`-byte elements) into a vector.
fn le_vec<T, const N: usize>(bytes: &[u8], decode: fn([u8; N]) -> T) -> Vec<T> {
    bytes
        .chunks_exact(N)
        .map(|chunk| {
            let mut a = [0u8; N];
            a.copy_from_slice(chunk);
            decode(a)
        })
        .collect()
}

/// Read an array (element type, count, elements) at nesting `depth` (1 = a top-level value).
fn read_array(
    r: &mut Reader<'_>,
    context: &dyn Fn() -> String,
    depth: usize,
) -> Result<MetaArray, GgufError> {
    let elem_type = r
        .u32()
        .ctx(|| format!("{}: array element type", context()))?;
    let count = r.u64().ctx(|| format!("{}: array length", context()))?;
    let Some((min_bytes, elem_name)) = min_element_bytes(elem_type) else {
        return Err(GgufError::UnknownValueType {
            context: format!("{}: array element", context()),
            type_id: elem_type,
        });
    };
    if elem_type == T_ARRAY && depth >= MAX_ARRAY_DEPTH {
        return Err(GgufError::NestingTooDeep {
            context: context(),
            max: MAX_ARRAY_DEPTH,
        });
    }
    // Check the count against the bytes left before any allocation sized by it.
    let needed = u128::from(count) * u128::from(min_bytes);
    let available = r.remaining() as u64;
    if needed > u128::from(available) {
        return Err(GgufError::CountTooLarge {
            context: context(),
            what: format!("array of {count} {elem_name}s"),
            needed,
            available,
        });
    }
    // `count * min_bytes <= remaining <= usize::MAX`, so these conversions and products hold.
    let n = count as usize;
    fn take<'b>(
        r: &mut Reader<'b>,
        n: u64,
        context: &dyn Fn() -> String,
    ) -> Result<&'b [u8], GgufError> {
        r.take(n).ctx(|| format!("{}: array data", context()))
    }
    let len = needed as u64;
    Ok(match elem_type {
        T_U8 => MetaArray::U8(take(r, len, context)?.to_vec()),
        T_I8 => MetaArray::I8(le_vec(take(r, len, context)?, i8::from_le_bytes)),
        T_U16 => MetaArray::U16(le_vec(take(r, len, context)?, u16::from_le_bytes)),
        T_I16 => MetaArray::I16(le_vec(take(r, len, context)?, i16::from_le_bytes)),
        T_U32 => MetaArray::U32(le_vec(take(r, len, context)?, u32::from_le_bytes)),
        T_I32 => MetaArray::I32(le_vec(take(r, len, context)?, i32::from_le_bytes)),
        T_F32 => MetaArray::F32(le_vec(take(r, len, context)?, f32::from_le_bytes)),
        T_U64 => MetaArray::U64(le_vec(take(r, len, context)?, u64::from_le_bytes)),
        T_I64 => MetaArray::I64(le_vec(take(r, len, context)?, i64::from_le_bytes)),
        T_F64 => MetaArray::F64(le_vec(take(r, len, context)?, f64::from_le_bytes)),
        T_BOOL => {
            let bytes = take(r, len, context)?;
            let mut out = Vec::with_capacity(n);
            for (i, &byte) in bytes.iter().enumerate() {
                match byte {
                    0 | 1 => out.push(byte == 1),
                    _ => {
                        return Err(GgufError::BadBool {
                            context: format!("{}: element {i}", context()),
                            byte,
                        });
                    }
                }
            }
            MetaArray::Bool(out)
        }
        T_STRING => {
            let mut out = Vec::with_capacity(n);
            for i in 0..n {
                let elem_context = || format!("{}: element {i}", context());
                out.push(r.string("string value", elem_context)?);
            }
            MetaArray::Str(out)
        }
        _ => {
            debug_assert_eq!(elem_type, T_ARRAY);
            let mut out = Vec::with_capacity(n);
            for i in 0..n {
                let elem_context = || format!("{}: element {i}", context());
                out.push(read_array(r, &elem_context, depth + 1)?);
            }
            MetaArray::Array(out)
        }
    })
}
