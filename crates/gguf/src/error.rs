//! The one error type of the GGUF reader. Every message names what is wrong and where (metadata
//! key, tensor name, byte offsets), so a bad file can be diagnosed from the message alone.

use std::path::PathBuf;

/// Everything that can go wrong opening or querying a GGUF file.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    #[error("cannot read {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("not a GGUF file: magic is {found:02x?}, expected \"GGUF\" (47 47 55 46)")]
    BadMagic { found: Vec<u8> },

    #[error("GGUF version {0} is not supported: pagoda reads versions 2 and 3")]
    UnsupportedVersion(u32),

    #[error(
        "big-endian GGUF (version {0} byte-swapped) is not supported: pagoda reads little-endian files"
    )]
    BigEndian(u32),

    #[error(
        "{context}: needs {needed} bytes at offset {offset}, only {available} left (file len {file_len})"
    )]
    Truncated {
        context: String,
        needed: u64,
        offset: u64,
        available: u64,
        file_len: u64,
    },

    /// A count read from the file promises more items than the bytes left could hold.
    #[error("{context}: {what} needs at least {needed} bytes, only {available} left")]
    CountTooLarge {
        context: String,
        what: String,
        needed: u128,
        available: u64,
    },

    #[error("{context}: bad bool byte {byte} (expected 0 or 1)")]
    BadBool { context: String, byte: u8 },

    #[error("{context}: invalid UTF-8 in {what}")]
    InvalidUtf8 { context: String, what: &'static str },

    #[error("{context}: unknown metadata value type {type_id}")]
    UnknownValueType { context: String, type_id: u32 },

    #[error("{context}: arrays nested deeper than {max} levels")]
    NestingTooDeep { context: String, max: usize },

    #[error("duplicate metadata key '{0}'")]
    DuplicateKey(String),

    #[error("duplicate tensor name '{0}'")]
    DuplicateTensor(String),

    #[error("general.alignment must be a u32 power of two, found {found}")]
    BadAlignment { found: String },

    #[error("tensor {name}: unknown or unsupported ggml type id {type_id}")]
    UnknownGgmlType { name: String, type_id: u32 },

    #[error("tensor {name}: {n_dims} dimensions, expected 1 to 4")]
    BadDimCount { name: String, n_dims: u32 },

    #[error("tensor {name}: {detail}")]
    BadShape { name: String, detail: String },

    #[error("tensor {name}: data offset {offset} is not a multiple of the alignment {alignment}")]
    Misaligned {
        name: String,
        offset: u64,
        alignment: usize,
    },

    #[error("tensor {name}: data [{start}, {end}) past end of file (len {file_len})")]
    DataOutOfBounds {
        name: String,
        start: u128,
        end: u128,
        file_len: u64,
    },

    #[error(
        "tensors {first} [{first_start}, {first_end}) and {second} [{second_start}, {second_end}) overlap"
    )]
    Overlap {
        first: String,
        first_start: u64,
        first_end: u64,
        second: String,
        second_start: u64,
        second_end: u64,
    },

    #[error("metadata key '{key}': expected {expected}, found {found}")]
    WrongType {
        key: String,
        expected: &'static str,
        found: &'static str,
    },

    #[error("metadata key '{key}': value {value} does not fit in {expected}")]
    OutOfRange {
        key: String,
        expected: &'static str,
        value: String,
    },

    #[error("required metadata key '{0}' is missing")]
    MissingKey(String),
}
