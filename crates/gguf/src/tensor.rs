//! Tensor infos: name, dims, ggml type, data offset. Shapes, sizes, alignment, bounds and overlap
//! are all checked here at open, so `GgufFile::tensor_data` can hand out slices without checks.

use pagoda_kernels::quant::GgmlType;

use crate::GgufError;
use crate::reader::{Reader, ShortExt};

/// ggml supports at most 4 dimensions (ggml.h `GGML_MAX_DIMS`).
pub const MAX_DIMS: u32 = 4;

/// One tensor of a GGUF file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    /// Shape, `ne0` first; `ne0` is the contiguous dimension (a row).
    pub dims: Vec<u64>,
    pub ty: GgmlType,
    /// Absolute byte offset of the data in the file.
    pub offset: u64,
    /// Bytes of data.
    pub size: usize,
}

impl TensorInfo {
    /// Number of elements (product of the dims; checked not to overflow at open).
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }
}

/// A tensor info as stored: its offset is still relative to the data section.
pub(crate) struct RawTensorInfo {
    pub(crate) info: TensorInfo,
    pub(crate) relative_offset: u64,
}

/// Read tensor info number `index` (name, n_dims, dims, type id, relative offset) and check its
/// shape. The absolute offset is filled in later by [`place_tensors`].
pub(crate) fn read_tensor_info(r: &mut Reader<'_>, index: u64) -> Result<RawTensorInfo, GgufError> {
    let name = r.string("tensor name", || format!("tensor info #{index}"))?;
    let n_dims = r
        .u32()
        .ctx(|| format!("tensor {name}: number of dimensions"))?;
    if n_dims == 0 || n_dims > MAX_DIMS {
        return Err(GgufError::BadDimCount { name, n_dims });
    }
    let mut dims = Vec::with_capacity(n_dims as usize);
    for i in 0..n_dims {
        dims.push(r.u64().ctx(|| format!("tensor {name}: dimension {i}"))?);
    }
    let type_id = r.u32().ctx(|| format!("tensor {name}: ggml type"))?;
    let relative_offset = r.u64().ctx(|| format!("tensor {name}: data offset"))?;
    let Some(ty) = GgmlType::from_id(type_id) else {
        return Err(GgufError::UnknownGgmlType { name, type_id });
    };
    let size = tensor_bytes(&name, &dims, ty)?;
    Ok(RawTensorInfo {
        info: TensorInfo {
            name,
            dims,
            ty,
            offset: 0,
            size,
        },
        relative_offset,
    })
}

/// Bytes of a tensor of shape `dims` and type `ty`, checking every dim is non-zero, ne0 is a
/// whole number of blocks, and nothing overflows.
pub(crate) fn tensor_bytes(name: &str, dims: &[u64], ty: GgmlType) -> Result<usize, GgufError> {
    let bad = |detail: String| GgufError::BadShape {
        name: name.to_owned(),
        detail,
    };
    if let Some(i) = dims.iter().position(|&d| d == 0) {
        return Err(bad(format!("dimension {i} is 0 (dims {dims:?})")));
    }
    let mut n_elements: u64 = 1;
    for &d in dims {
        n_elements = n_elements
            .checked_mul(d)
            .ok_or_else(|| bad(format!("element count of dims {dims:?} overflows")))?;
    }
    let ne0 = dims[0];
    let block = ty.block_size() as u64;
    if !ne0.is_multiple_of(block) {
        return Err(bad(format!(
            "ne0 = {ne0} is not a multiple of the {ty} block size {block}"
        )));
    }
    let bytes = (n_elements / block)
        .checked_mul(ty.type_size() as u64)
        .and_then(|b| usize::try_from(b).ok())
        .ok_or_else(|| bad(format!("byte size of {ty} dims {dims:?} overflows")))?;
    Ok(bytes)
}

/// Turn relative offsets into absolute ones and check each tensor is aligned, inside the file,
/// and disjoint from every other.
pub(crate) fn place_tensors(
    raw: Vec<RawTensorInfo>,
    data_start: u64,
    alignment: usize,
    file_len: u64,
) -> Result<Vec<TensorInfo>, GgufError> {
    let mut tensors = Vec::with_capacity(raw.len());
    for RawTensorInfo {
        mut info,
        relative_offset,
    } in raw
    {
        if !relative_offset.is_multiple_of(alignment as u64) {
            return Err(GgufError::Misaligned {
                name: info.name,
                offset: relative_offset,
                alignment,
            });
        }
        let start = u128::from(data_start) + u128::from(relative_offset);
        let end = start + info.size as u128;
        if end > u128::from(file_len) {
            return Err(GgufError::DataOutOfBounds {
                name: info.name,
                start,
                end,
                file_len,
            });
        }
        // end <= file_len, so start fits in u64.
        info.offset = start as u64;
        tensors.push(info);
    }

    let mut order: Vec<usize> = (0..tensors.len()).collect();
    order.sort_by_key(|&i| tensors[i].offset);
    for pair in order.windows(2) {
        let (a, b) = (&tensors[pair[0]], &tensors[pair[1]]);
        let a_end = a.offset + a.size as u64;
        if b.offset < a_end {
            return Err(GgufError::Overlap {
                first: a.name.clone(),
                first_start: a.offset,
                first_end: a_end,
                second: b.name.clone(),
                second_start: b.offset,
                second_end: b.offset + b.size as u64,
            });
        }
    }
    Ok(tensors)
}
