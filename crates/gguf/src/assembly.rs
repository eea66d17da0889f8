//! Builds a [`GgufFile`] in memory from metadata and tensors, for checkpoints in other formats
//! converted at load (a Hugging Face safetensors directory): everything downstream of the
//! loader reads one kind of file. Tensor shapes are checked as when a file is opened.

use std::collections::HashMap;

use crate::GgufError;
use crate::file::{DEFAULT_ALIGNMENT, GgufFile};
use crate::metadata::MetaValue;
use crate::tensor::{TensorInfo, tensor_bytes};

/// Metadata and tensor data gathered one tensor at a time (so a converter holds one tensor's
/// scratch, not a second copy of the model), then frozen into a [`GgufFile`].
#[derive(Default)]
pub struct GgufAssembly {
    metadata: Vec<(String, MetaValue)>,
    tensors: Vec<TensorInfo>,
    data: Vec<u8>,
}

impl GgufAssembly {
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets metadata `key` (a later value for the same key replaces the earlier one).
    pub fn kv(&mut self, key: &str, value: MetaValue) {
        match self.metadata.iter_mut().find(|(k, _)| k == key) {
            Some(entry) => entry.1 = value,
            None => self.metadata.push((key.to_owned(), value)),
        }
    }

    /// Appends a tensor of GGUF dims `dims` (ne0 first) and type `ty`; `data` must be exactly
    /// its size.
    pub fn tensor(
        &mut self,
        name: &str,
        dims: &[u64],
        ty: crate::GgmlType,
        data: &[u8],
    ) -> Result<(), GgufError> {
        let size = tensor_bytes(name, dims, ty)?;
        if size != data.len() {
            return Err(GgufError::BadShape {
                name: name.to_owned(),
                detail: format!("{} bytes given, {ty} dims {dims:?} take {size}", data.len()),
            });
        }
        if self.tensors.iter().any(|t| t.name == name) {
            return Err(GgufError::DuplicateTensor(name.to_owned()));
        }
        let offset = self.data.len().next_multiple_of(DEFAULT_ALIGNMENT);
        self.data.resize(offset, 0);
        self.data.extend_from_slice(data);
        self.tensors.push(TensorInfo {
            name: name.to_owned(),
            dims: dims.to_vec(),
            ty,
            offset: offset as u64,
            size,
        });
        Ok(())
    }

    pub fn finish(self) -> GgufFile {
        let key_index: HashMap<String, usize> = self
            .metadata
            .iter()
            .enumerate()
            .map(|(i, (k, _))| (k.clone(), i))
            .collect();
        GgufFile::assembled(self.metadata, key_index, self.tensors, self.data)
    }
}
