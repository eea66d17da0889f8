//! A float matrix as the bytes of a GGUF tensor type, rows quantized in parallel: shared by the
//! checkpoint's own tensors and the sentence-transformers modules (Dense layers).

use pagoda_gguf::GgmlType;
use pagoda_kernels::quant::quantize_row;

use crate::HfError;

/// `values` (rows of `cols`) as `ty` bytes.
pub(crate) fn matrix_bytes(ty: GgmlType, values: &[f32], cols: usize) -> Result<Vec<u8>, HfError> {
    let row_bytes = ty.row_bytes(cols).ok_or_else(|| HfError::BadTensor {
        name: String::new(),
        detail: format!("{cols} columns are not whole {ty} blocks"),
    })?;
    let mut bytes = vec![0u8; values.len() / cols.max(1) * row_bytes];
    quantize_rows(ty, values, cols, &mut bytes, row_bytes);
    Ok(bytes)
}

/// Quantizes `values` (rows of `cols`) into `dst`, rows spread over the kernel thread pool:
/// the K-quant scale search makes this the slow part of a load.
fn quantize_rows(ty: GgmlType, values: &[f32], cols: usize, dst: &mut [u8], row_bytes: usize) {
    let rows = dst.len() / row_bytes;
    pagoda_kernels::parallel::for_rows(rows, [dst], &|range, [out]| {
        for (r, row) in range.zip(out.chunks_exact_mut(row_bytes)) {
            quantize_row(ty, &values[r * cols..(r + 1) * cols], row);
        }
    });
}
