//! Tensor lookup with shape and type checks. Matrices stay in the memory-mapped GGUF and are
//! referred to by tensor index; small vectors (norm weights, biases) are dequantized into `Vec<f32>`.
//! Projections of one input (q/k/v, gate/up) can be joined into one matrix so a step runs one
//! matmul (one fork-join) for them: in place when the file stores them back to back.
//! Matrices the forward pass multiplies by are repacked once at load into the kernels' 8-row
//! interleaved layout ([`PackedMatrix`]) when their type has packed kernels on this CPU, or
//! mapped from the load's pack cache file when it holds them.

use std::ops::Range;
use std::sync::{Arc, OnceLock};

use pagoda_gguf::GgufFile;
use pagoda_kernels::gemm::{F32Panels, gemm_f32};
use pagoda_kernels::matmul::{self, MatmulScratch};
use pagoda_kernels::parallel;
use pagoda_kernels::quant::packed::{GROUP_ROWS, PackedMatrix};
use pagoda_kernels::quant::{self, GgmlType};

use crate::ModelError;
use crate::pack_cache::{PackCacheStatus, PackSession};
use crate::tensor_parallel::error::TpError;

/// Types the matmul and dequantize kernels accept for weight matrices.
fn is_weight_type(ty: GgmlType) -> bool {
    matches!(
        ty,
        GgmlType::F32
            | GgmlType::F16
            | GgmlType::BF16
            | GgmlType::Q4_0
            | GgmlType::Q4_1
            | GgmlType::Q5_0
            | GgmlType::Q5_1
            | GgmlType::Q8_0
            | GgmlType::Q2_K
            | GgmlType::Q3_K
            | GgmlType::Q4_K
            | GgmlType::Q5_K
            | GgmlType::Q6_K
            | GgmlType::IQ4_NL
            | GgmlType::IQ4_XS
    )
}

/// A weight matrix of `rows` rows of `cols` elements, stored in the GGUF as `ty`.
#[derive(Clone, Debug)]
pub struct Matrix {
    pub name: String,
    pub ty: GgmlType,
    /// Output features (GGUF ne1).
    pub rows: usize,
    /// Input features (GGUF ne0, contiguous).
    pub cols: usize,
    storage: Storage,
    /// The same rows in the matmul kernels' packed layout, when [`Weights::packed`] made one.
    packed: Option<Arc<PackedMatrix>>,
    /// A float matrix as f32 panels for the blocked f32 GEMM, when [`Weights::packed`] made
    /// them (weights built [`Weights::with_float_panels`]).
    panels: Option<Arc<F32Panels>>,
}

/// Where a matrix's bytes are.
#[derive(Clone, Debug)]
enum Storage {
    /// Tensor `index` of the file's tensor list.
    Tensor(usize),
    /// `len` bytes of the file from the start of tensor `first`: tensors stored back to back,
    /// read as one matrix.
    Adjacent { first: usize, len: usize },
    /// Parts not adjacent in the file, copied together the first time the matrix is read as
    /// one ([`Weights::bytes`]). A packed matrix is read only by its packer, which takes a
    /// transient copy, so it holds no copy at all, and one mapped from the pack cache never
    /// copies its parts.
    Gathered {
        parts: Arc<[Matrix]>,
        copy: Arc<OnceLock<Box<[u8]>>>,
    },
    /// Rows and columns of another matrix (a tensor-parallel rank's part), copied out the
    /// first time it is read as a whole; its packer takes a transient copy, as for `Gathered`.
    Slice {
        of: Arc<Matrix>,
        rows: Range<usize>,
        cols: Range<usize>,
        copy: Arc<OnceLock<Box<[u8]>>>,
    },
}

/// A linear layer: a matrix and an optional bias.
#[derive(Clone, Debug)]
pub struct Linear {
    pub weight: Matrix,
    pub bias: Option<Vec<f32>>,
}

/// The open GGUF file and the checks that turn its tensors into typed weights.
#[derive(Clone)]
pub struct Weights {
    file: Arc<GgufFile>,
    /// Where [`Weights::packed`] finds and records packed layouts during the load.
    pack: Arc<PackSession>,
    /// Whether [`Weights::packed`] turns float matrices into f32 panels.
    float_panels: bool,
}

impl Weights {
    /// Weights packed at load, with no cache.
    pub fn new(file: Arc<GgufFile>) -> Self {
        Self::with_pack_session(file, PackSession::off())
    }

    pub(crate) fn with_pack_session(file: Arc<GgufFile>, pack: PackSession) -> Self {
        Self {
            file,
            pack: Arc::new(pack),
            float_panels: false,
        }
    }

    /// These weights with [`Weights::packed`] also repacking f32/f16/bf16 matrices into f32
    /// panels for the blocked f32 GEMM (`pagoda_kernels::gemm`). The encoders take it: their
    /// exact mode is all float matrices multiplied over many tokens at once. The decoders do
    /// not: a decode step is one row per sequence, bound by reading the weights, which f32
    /// panels would make twice as large as f16 ones.
    pub fn with_float_panels(mut self) -> Self {
        self.float_panels = true;
        self
    }

    /// Ends the load's use of the pack cache (writing a new file if anything was packed); later
    /// [`Weights::packed`] calls pack without it.
    pub(crate) fn finish_packing(&mut self) -> PackCacheStatus {
        let session = std::mem::replace(&mut self.pack, Arc::new(PackSession::off()));
        match Arc::try_unwrap(session) {
            Ok(session) => session.finish(),
            // A clone made during the load still holds the session: leave the cache alone.
            Err(_) => {
                PackCacheStatus::Unavailable("the weights were cloned during the load".into())
            }
        }
    }

    pub fn file(&self) -> &GgufFile {
        &self.file
    }

    /// The shared handle of the file (tensor-parallel ranks load their parts from it).
    pub(crate) fn file_arc(&self) -> Arc<GgufFile> {
        Arc::clone(&self.file)
    }

    /// Rows `rows` and input columns `cols` of `l` (its bias sliced alike): a
    /// tensor-parallel rank's part. `l` itself when the ranges are whole. Columns must fall
    /// on the type's block boundaries.
    pub(crate) fn slice(
        &self,
        l: Linear,
        rows: Range<usize>,
        cols: Range<usize>,
    ) -> Result<Linear, TpError> {
        let m = &l.weight;
        if rows == (0..m.rows) && cols == (0..m.cols) {
            return Ok(l);
        }
        let block = m.ty.block_size();
        if let Some(&at) = [cols.start, cols.end]
            .iter()
            .find(|&&c| !c.is_multiple_of(block))
        {
            return Err(TpError::NotBlockAligned {
                tensor: m.name.clone(),
                ty: m.ty.name().to_string(),
                at,
                block,
            });
        }
        let bias = l.bias.as_ref().map(|b| b[rows.clone()].to_vec());
        let weight = Matrix {
            name: format!(
                "{}[{}..{},{}..{}]",
                m.name, rows.start, rows.end, cols.start, cols.end
            ),
            ty: m.ty,
            rows: rows.len(),
            cols: cols.len(),
            storage: Storage::Slice {
                of: Arc::new(l.weight),
                rows,
                cols,
                copy: Arc::default(),
            },
            packed: None,
            panels: None,
        };
        Ok(Linear { weight, bias })
    }

    /// The bytes of rows `rows`, columns `cols` of `of` (block-aligned, checked by `slice`).
    fn slice_bytes(&self, of: &Matrix, rows: &Range<usize>, cols: &Range<usize>) -> Box<[u8]> {
        // `row_bytes` succeeded when the matrix was checked, and `slice` checked alignment.
        let rb = of.ty.row_bytes(of.cols).unwrap_or(0);
        let skip = of.ty.row_bytes(cols.start).unwrap_or(0);
        let len = of.ty.row_bytes(cols.len()).unwrap_or(0);
        self.with_bytes(of, |b| {
            let mut out = Vec::with_capacity(rows.len() * len);
            for r in rows.clone() {
                out.extend_from_slice(&b[r * rb + skip..][..len]);
            }
            out.into_boxed_slice()
        })
    }

    /// True when the file has a tensor of this name.
    pub fn has(&self, name: &str) -> bool {
        self.file.tensor(name).is_some()
    }

    /// The matrix `name` of `rows` x `cols` (GGUF dims `[cols, rows]`).
    pub fn matrix(&self, name: &str, rows: usize, cols: usize) -> Result<Matrix, ModelError> {
        let (index, info) = self
            .file
            .tensors()
            .iter()
            .enumerate()
            .find(|(_, t)| t.name == name)
            .ok_or_else(|| ModelError::MissingTensor(name.to_string()))?;
        let expected = vec![cols as u64, rows as u64];
        if info.dims != expected {
            return Err(ModelError::TensorShape {
                name: name.to_string(),
                got: info.dims.clone(),
                expected,
            });
        }
        if !is_weight_type(info.ty) {
            return Err(ModelError::TensorType {
                name: name.to_string(),
                ty: info.ty,
            });
        }
        let row_bytes = info
            .ty
            .row_bytes(cols)
            .ok_or_else(|| ModelError::TensorType {
                name: name.to_string(),
                ty: info.ty,
            })?;
        let data = self.file.tensor_data(info);
        let expected_bytes = row_bytes * rows;
        if data.len() != expected_bytes {
            return Err(ModelError::TensorSize {
                name: name.to_string(),
                got: data.len(),
                expected: expected_bytes,
            });
        }
        Ok(Matrix {
            name: name.to_string(),
            ty: info.ty,
            rows,
            cols,
            storage: Storage::Tensor(index),
            packed: None,
            panels: None,
        })
    }

    /// The linear layers `parts` (all of `cols` inputs) stacked into one of their summed rows,
    /// biases concatenated; `None` when their types or bias presence differ. Zero-copy when
    /// the file stores the weights back to back, else copied once here.
    pub fn stacked(&self, parts: &[&Linear]) -> Option<Linear> {
        let first = parts.first()?;
        let (ty, cols) = (first.weight.ty, first.weight.cols);
        if parts.iter().any(|p| {
            p.weight.ty != ty || p.weight.cols != cols || p.bias.is_some() != first.bias.is_some()
        }) {
            return None;
        }
        let rows = parts.iter().map(|p| p.weight.rows).sum();
        let bias = first.bias.as_ref().map(|_| {
            parts
                .iter()
                .flat_map(|p| p.bias.iter().flatten().copied())
                .collect()
        });
        let in_file = parts
            .iter()
            .all(|p| matches!(p.weight.storage, Storage::Tensor(_)));
        let adjacent = in_file
            && parts.windows(2).all(|w| {
                let a = self.bytes(&w[0].weight);
                // Pointer comparison only: both slices lie in the file's one mapping.
                a.as_ptr().wrapping_add(a.len()) == self.bytes(&w[1].weight).as_ptr()
            });
        let storage = match (&first.weight.storage, adjacent) {
            (Storage::Tensor(index), true) => Storage::Adjacent {
                first: *index,
                len: parts.iter().map(|p| self.bytes(&p.weight).len()).sum(),
            },
            _ => Storage::Gathered {
                parts: parts.iter().map(|p| p.weight.clone()).collect(),
                copy: Arc::default(),
            },
        };
        let name = parts
            .iter()
            .map(|p| p.weight.name.as_str())
            .collect::<Vec<_>>()
            .join("+");
        Some(Linear {
            weight: Matrix {
                name,
                ty,
                rows,
                cols,
                storage,
                packed: None,
                panels: None,
            },
            bias,
        })
    }

    /// The vector `name` of `len` elements, dequantized to f32.
    pub fn vector(&self, name: &str, len: usize) -> Result<Vec<f32>, ModelError> {
        let info = self
            .file
            .tensor(name)
            .ok_or_else(|| ModelError::MissingTensor(name.to_string()))?;
        if info.dims != [len as u64] {
            return Err(ModelError::TensorShape {
                name: name.to_string(),
                got: info.dims.clone(),
                expected: vec![len as u64],
            });
        }
        if !is_weight_type(info.ty) || info.ty.row_bytes(len).is_none() {
            return Err(ModelError::TensorType {
                name: name.to_string(),
                ty: info.ty,
            });
        }
        let data = self.file.tensor_data(info);
        let expected = info.ty.row_bytes(len).unwrap_or(0);
        if data.len() != expected {
            return Err(ModelError::TensorSize {
                name: name.to_string(),
                got: data.len(),
                expected,
            });
        }
        let mut out = vec![0.0f32; len];
        quant::dequantize_row(info.ty, data, &mut out);
        Ok(out)
    }

    /// A linear layer `name.weight` (and `name.bias` when `bias` is true).
    pub fn linear(
        &self,
        name: &str,
        rows: usize,
        cols: usize,
        bias: bool,
    ) -> Result<Linear, ModelError> {
        let weight = self.matrix(&format!("{name}.weight"), rows, cols)?;
        let bias = if bias {
            Some(self.vector(&format!("{name}.bias"), rows)?)
        } else {
            None
        };
        Ok(Linear { weight, bias })
    }

    /// `l` with its matrix also repacked for the matmul kernels, when its type has a packed form
    /// on this CPU (taken from the pack cache file when it holds it). Done once at load;
    /// `forward` then reads only the packed copy.
    pub fn packed(&self, mut l: Linear) -> Linear {
        let m = &l.weight;
        let found = self.pack.lookup(&m.name, m.ty, m.rows, m.cols);
        let hit = found.is_some();
        let packed = found.or_else(|| {
            self.with_bytes(m, |w| PackedMatrix::pack(m.ty, m.rows, m.cols, w))
                .map(Arc::new)
        });
        let float = matches!(m.ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16);
        match &packed {
            Some(p) => self.pack.record(&m.name, p, hit),
            None if self.float_panels && float => {
                let panels = self.with_bytes(m, |w| {
                    // `row_bytes` succeeded when the matrix was checked.
                    let rb = m.ty.row_bytes(m.cols).unwrap_or(0);
                    F32Panels::pack(m.rows, m.cols, |r, out| {
                        quant::dequantize_row(m.ty, &w[r * rb..(r + 1) * rb], out)
                    })
                });
                l.weight.panels = Some(Arc::new(panels));
            }
            // The plain kernels will read the rows: copy gathered parts now, not in a step.
            None => {
                self.bytes(m);
            }
        }
        l.weight.packed = packed;
        l
    }

    /// `f` of the bytes of `m`; gathered parts nothing has read yet are copied together for
    /// `f` only, not kept.
    fn with_bytes<R>(&self, m: &Matrix, f: impl FnOnce(&[u8]) -> R) -> R {
        match &m.storage {
            Storage::Gathered { parts, copy } if copy.get().is_none() => f(&self.gather(parts)),
            Storage::Slice {
                of,
                rows,
                cols,
                copy,
            } if copy.get().is_none() => f(&self.slice_bytes(of, rows, cols)),
            _ => f(self.bytes(m)),
        }
    }

    /// The bytes of `parts`, one after the other.
    fn gather(&self, parts: &[Matrix]) -> Box<[u8]> {
        let len = |p: &Matrix| p.ty.row_bytes(p.cols).unwrap_or(0) * p.rows;
        let mut out = Vec::with_capacity(parts.iter().map(len).sum());
        for p in parts {
            // A sliced part is copied for this gather only.
            self.with_bytes(p, |b| out.extend_from_slice(b));
        }
        out.into_boxed_slice()
    }

    /// The bytes of a matrix checked by [`Weights::matrix`].
    pub fn bytes<'a>(&'a self, m: &'a Matrix) -> &'a [u8] {
        match &m.storage {
            Storage::Tensor(index) => {
                let info = &self.file.tensors()[*index];
                debug_assert_eq!(info.name, m.name);
                self.file.tensor_data(info)
            }
            Storage::Adjacent { first, len } => {
                let start = self.file.tensor_data(&self.file.tensors()[*first]).as_ptr();
                // SAFETY: `stacked` checked that the parts lie back to back in the file's data
                // (one mapping or buffer, which `self.file` keeps alive and never mutates), so
                // these `len` bytes are the parts' bytes, in bounds of that one allocation.
                unsafe { std::slice::from_raw_parts(start, *len) }
            }
            Storage::Gathered { parts, copy } => copy.get_or_init(|| self.gather(parts)),
            Storage::Slice {
                of,
                rows,
                cols,
                copy,
            } => copy.get_or_init(|| self.slice_bytes(of, rows, cols)),
        }
    }

    /// Dequantizes row `row` of `m` into `out` (`out.len() == m.cols`).
    pub fn dequantize_row(&self, m: &Matrix, row: usize, out: &mut [f32]) {
        debug_assert!(row < m.rows && out.len() == m.cols);
        // `row_bytes` succeeded when the matrix was checked.
        let rb = m.ty.row_bytes(m.cols).unwrap_or(0);
        quant::dequantize_row(m.ty, &self.bytes(m)[row * rb..(row + 1) * rb], out);
    }

    /// [`Weights::forward`] with the output columns split over `outs` (consecutive column
    /// ranges, part `i` a `[t][w_i]` buffer): a stacked q/k/v or gate/up product lands in its
    /// parts directly. Packed matrices write the parts in place; the others go through `tmp`
    /// (`[t][rows]`) and are copied apart.
    pub fn forward_split(
        &self,
        l: &Linear,
        x: &[f32],
        t: usize,
        outs: &mut [&mut [f32]],
        scratch: &mut MatmulScratch,
        tmp: &mut Vec<f32>,
    ) {
        let m = &l.weight;
        let n_parts = outs.len();
        assert!(
            (1..=matmul::MAX_OUT_PARTS).contains(&n_parts),
            "forward_split: {n_parts} output parts"
        );
        if t == 0 {
            return; // an empty batch: no rows, and no widths to take from them
        }
        let x = &x[..t * m.cols];
        let mut widths = [0usize; matmul::MAX_OUT_PARTS];
        for (w, o) in widths.iter_mut().zip(outs.iter()) {
            *w = o.len() / t;
        }
        let widths = &widths[..n_parts];
        // A packed product writes whole 8-row groups, so no group may straddle two parts.
        let whole_groups = widths[..n_parts - 1]
            .iter()
            .all(|w| w.is_multiple_of(GROUP_ROWS));
        match &m.packed {
            Some(p) if whole_groups => matmul::matmul_packed_into(p, x, t, outs, scratch),
            _ => {
                if tmp.len() < t * m.rows {
                    tmp.resize(t * m.rows, 0.0);
                }
                self.forward(l, x, t, &mut tmp[..t * m.rows], scratch);
                let mut start = 0;
                for (o, &w) in outs.iter_mut().zip(widths) {
                    for (dst, src) in o.chunks_exact_mut(w).zip(tmp.chunks_exact(m.rows)) {
                        dst.copy_from_slice(&src[start..start + w]);
                    }
                    start += w;
                }
                return;
            }
        }
        if let Some(b) = &l.bias {
            let mut start = 0;
            for (o, &w) in outs.iter_mut().zip(widths) {
                for row in o.chunks_exact_mut(w) {
                    for (v, b) in row.iter_mut().zip(&b[start..start + w]) {
                        *v += b;
                    }
                }
                start += w;
            }
        }
    }

    /// `y[t][rows] = x[t][cols] . W^T (+ bias)` over `t` rows.
    pub fn forward(
        &self,
        l: &Linear,
        x: &[f32],
        t: usize,
        y: &mut [f32],
        scratch: &mut MatmulScratch,
    ) {
        self.product(l, x, t, y, scratch);
        let rows = l.weight.rows;
        if let Some(b) = &l.bias {
            parallel::for_rows(t, [&mut y[..t * rows]], &|_, [part]| {
                for row in part.chunks_exact_mut(rows) {
                    for (v, b) in row.iter_mut().zip(b) {
                        *v += b;
                    }
                }
            });
        }
    }

    /// [`Weights::forward`] without the bias: for a caller that adds it in its next pass over
    /// the rows (the encoders' fused bias + GELU, bias + residual + LayerNorm).
    pub fn product(
        &self,
        l: &Linear,
        x: &[f32],
        t: usize,
        y: &mut [f32],
        scratch: &mut MatmulScratch,
    ) {
        let m = &l.weight;
        debug_assert!(x.len() >= t * m.cols && y.len() >= t * m.rows);
        let y = &mut y[..t * m.rows];
        let x = &x[..t * m.cols];
        match (&m.packed, &m.panels) {
            (Some(p), _) => matmul::matmul_packed(p, x, t, y, scratch),
            (None, Some(p)) => gemm_f32(p, x, t, y),
            (None, None) => matmul::matmul(self.bytes(m), m.ty, m.rows, m.cols, x, t, y, scratch),
        }
    }
}
