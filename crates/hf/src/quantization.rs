//! `--quantization`: what matrices of a float checkpoint become at load.

use pagoda_kernels::quant::GgmlType;

use crate::safetensors::Dtype;

/// The in-situ quantization of a checkpoint's matrices.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Quantization {
    /// Q8_0: 8.5 bits per weight, close to the float model (the default).
    #[default]
    Q8_0,
    /// Q4_K: 4.5 bits per weight; matrices whose rows are not whole 256-blocks take Q8_0.
    Q4K,
    /// Q4_0: 4.5 bits per weight, the plainest 4-bit format.
    Q4_0,
    /// Keep the checkpoint's own f32 / f16 / bf16.
    None,
}

impl Quantization {
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "q8_0" => Self::Q8_0,
            "q4_k" => Self::Q4K,
            "q4_0" => Self::Q4_0,
            "none" => Self::None,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Q8_0 => "q8_0",
            Self::Q4K => "q4_k",
            Self::Q4_0 => "q4_0",
            Self::None => "none",
        }
    }

    /// The GGUF type of a matrix of `cols` columns stored as `dtype`: the target when its rows
    /// are whole blocks of it, else the next that fits (as llama.cpp's quantizer falls back),
    /// else the checkpoint's own type.
    pub fn matrix_type(self, dtype: Dtype, cols: usize) -> GgmlType {
        let own = match dtype {
            Dtype::F32 => GgmlType::F32,
            Dtype::F16 => GgmlType::F16,
            Dtype::BF16 => GgmlType::BF16,
        };
        let chain: &[GgmlType] = match self {
            Self::Q8_0 => &[GgmlType::Q8_0],
            Self::Q4K => &[GgmlType::Q4_K, GgmlType::Q8_0],
            Self::Q4_0 => &[GgmlType::Q4_0],
            Self::None => &[],
        };
        chain
            .iter()
            .copied()
            .find(|t| cols.is_multiple_of(t.block_size()))
            .unwrap_or(own)
    }
}
