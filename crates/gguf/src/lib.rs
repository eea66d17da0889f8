//! GGUF v2/v3 reader: header, metadata, tensor infos, and zero-copy tensor data over an mmap.
//! Every offset, size, count and string length from the file is checked before use, so hostile
//! input yields a [`GgufError`] naming the problem, never a panic or an oversized allocation.

mod assembly;
mod end_of_generation;
mod error;
mod file;
mod getters;
mod metadata;
mod reader;
mod tensor;

pub use assembly::GgufAssembly;
pub use end_of_generation::{EOG_TEXTS, end_of_generation_ids};
pub use error::GgufError;
pub use file::{DEFAULT_ALIGNMENT, GgufFile};
pub use metadata::{MAX_ARRAY_DEPTH, MetaArray, MetaValue};
pub use pagoda_kernels::quant::GgmlType;
pub use tensor::{MAX_DIMS, TensorInfo};
