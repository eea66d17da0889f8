//! GGML tensor element types and their block layouts. Names, ids and byte layouts follow ggml
//! (`ggml/src/ggml-common.h`) exactly, so GGUF tensor data is used in place. Row-level entry
//! points: [`dequantize_row`], [`quantize_row`], [`quantize_activations`] and [`vec_dot`].

mod avx2;
mod avx2_iq4;
mod avx2_k_low;
pub(crate) mod dispatch;
mod float;
mod iq4;
mod k_quants;
mod k_quants_low;
mod legacy;
pub mod packed;
pub(crate) mod tile;

use crate::cpu::SimdLevel;

/// A GGML element type as stored in GGUF tensor infos.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GgmlType {
    /// 32-bit float.
    F32,
    /// IEEE half.
    F16,
    /// 32 weights: f16 scale, 16 bytes of nibbles; (q - 8) * d.
    Q4_0,
    /// 32 weights: f16 scale, f16 min, 16 bytes of nibbles; q * d + m.
    Q4_1,
    /// 32 weights: f16 scale, 32 high bits, 16 bytes of nibbles; (q - 16) * d.
    Q5_0,
    /// 32 weights: f16 scale, 32 x i8; q * d.
    Q8_0,
    /// 32 weights: f16 scale, f16 min, 32 high bits, 16 bytes of nibbles; q * d + m.
    Q5_1,
    /// Activation format for Q4_1/Q5_1 dots: f16 d, f16 s (= d * sum q), 32 x i8.
    Q8_1,
    /// 256 weights in 16 sub-blocks of 16, 2-bit quants with 4-bit scales and mins.
    Q2_K,
    /// 256 weights in 16 sub-blocks of 16, 3-bit quants (2 low bits + a high-bit mask) with
    /// 6-bit signed scales.
    Q3_K,
    /// 256 weights in 8 sub-blocks of 32 with 6-bit scales and mins.
    Q4_K,
    /// 256 weights in 8 sub-blocks of 32 with 6-bit scales and mins, 5-bit quants.
    Q5_K,
    /// 256 weights in 16 sub-blocks of 16 with 8-bit scales, 6-bit quants.
    Q6_K,
    /// Activation format for k-quant dots: f32 d, 256 x i8, 16 x i16 block sums.
    Q8_K,
    /// 32 weights: f16 scale, 16 bytes of nibbles indexing a fixed non-linear 16-value grid.
    IQ4_NL,
    /// 256 weights: IQ4_NL's grid with a 6-bit scale per 32 under an f16 super-scale.
    IQ4_XS,
    /// bfloat16.
    BF16,
}

impl GgmlType {
    /// Every type pagoda reads, in ggml id order.
    pub const ALL: [GgmlType; 17] = [
        Self::F32,
        Self::F16,
        Self::Q4_0,
        Self::Q4_1,
        Self::Q5_0,
        Self::Q5_1,
        Self::Q8_0,
        Self::Q8_1,
        Self::Q2_K,
        Self::Q3_K,
        Self::Q4_K,
        Self::Q5_K,
        Self::Q6_K,
        Self::Q8_K,
        Self::IQ4_NL,
        Self::IQ4_XS,
        Self::BF16,
    ];

    /// The type for a ggml type id, `None` for ids pagoda does not support.
    pub fn from_id(id: u32) -> Option<Self> {
        Some(match id {
            0 => Self::F32,
            1 => Self::F16,
            2 => Self::Q4_0,
            3 => Self::Q4_1,
            6 => Self::Q5_0,
            7 => Self::Q5_1,
            8 => Self::Q8_0,
            9 => Self::Q8_1,
            10 => Self::Q2_K,
            11 => Self::Q3_K,
            12 => Self::Q4_K,
            13 => Self::Q5_K,
            14 => Self::Q6_K,
            15 => Self::Q8_K,
            20 => Self::IQ4_NL,
            23 => Self::IQ4_XS,
            30 => Self::BF16,
            _ => return None,
        })
    }

    /// The ggml type id.
    pub fn id(self) -> u32 {
        match self {
            Self::F32 => 0,
            Self::F16 => 1,
            Self::Q4_0 => 2,
            Self::Q4_1 => 3,
            Self::Q5_0 => 6,
            Self::Q5_1 => 7,
            Self::Q8_0 => 8,
            Self::Q8_1 => 9,
            Self::Q2_K => 10,
            Self::Q3_K => 11,
            Self::Q4_K => 12,
            Self::Q5_K => 13,
            Self::Q6_K => 14,
            Self::Q8_K => 15,
            Self::IQ4_NL => 20,
            Self::IQ4_XS => 23,
            Self::BF16 => 30,
        }
    }

    /// ggml's name for the type.
    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "F32",
            Self::F16 => "F16",
            Self::Q4_0 => "Q4_0",
            Self::Q4_1 => "Q4_1",
            Self::Q5_0 => "Q5_0",
            Self::Q5_1 => "Q5_1",
            Self::Q8_0 => "Q8_0",
            Self::Q8_1 => "Q8_1",
            Self::Q2_K => "Q2_K",
            Self::Q3_K => "Q3_K",
            Self::Q4_K => "Q4_K",
            Self::Q5_K => "Q5_K",
            Self::Q6_K => "Q6_K",
            Self::Q8_K => "Q8_K",
            Self::IQ4_NL => "IQ4_NL",
            Self::IQ4_XS => "IQ4_XS",
            Self::BF16 => "BF16",
        }
    }

    /// Elements per block.
    pub fn block_size(self) -> usize {
        match self {
            Self::F32 | Self::F16 | Self::BF16 => 1,
            Self::Q4_0
            | Self::Q4_1
            | Self::Q5_0
            | Self::Q5_1
            | Self::Q8_0
            | Self::Q8_1
            | Self::IQ4_NL => 32,
            Self::Q2_K
            | Self::Q3_K
            | Self::Q4_K
            | Self::Q5_K
            | Self::Q6_K
            | Self::Q8_K
            | Self::IQ4_XS => 256,
        }
    }

    /// Bytes per block.
    pub fn type_size(self) -> usize {
        match self {
            Self::F32 => 4,
            Self::F16 | Self::BF16 => 2,
            Self::Q4_0 => 18,
            Self::Q4_1 => 20,
            Self::Q5_0 => 22,
            Self::Q5_1 => 24,
            Self::Q8_0 => 34,
            Self::Q8_1 => 36,
            Self::Q2_K => 84,
            Self::Q3_K => 110,
            Self::Q4_K => 144,
            Self::Q5_K => 176,
            Self::Q6_K => 210,
            Self::Q8_K => 292,
            Self::IQ4_NL => 18,
            Self::IQ4_XS => 136,
        }
    }

    /// Bytes of a row of `n` elements; `None` when `n` is not a whole number of blocks or the
    /// size overflows.
    pub fn row_bytes(self, n: usize) -> Option<usize> {
        if !n.is_multiple_of(self.block_size()) {
            return None;
        }
        (n / self.block_size()).checked_mul(self.type_size())
    }

    /// The format activations are converted to before a dot product with a weight row of this
    /// type, as in ggml-cpu's type traits: Q8_0 for Q4_0/Q5_0/Q8_0/IQ4_NL, Q8_1 for Q4_1/Q5_1,
    /// Q8_K for the k-quants and IQ4_XS, and f32 for the float types. `None` for Q8_1 and Q8_K, which are activation
    /// formats with no weight-row dot product.
    pub fn vec_dot_type(self) -> Option<GgmlType> {
        match self {
            Self::F32 | Self::F16 | Self::BF16 => Some(Self::F32),
            Self::Q4_0 | Self::Q5_0 | Self::Q8_0 | Self::IQ4_NL => Some(Self::Q8_0),
            Self::Q4_1 | Self::Q5_1 => Some(Self::Q8_1),
            Self::Q2_K | Self::Q3_K | Self::Q4_K | Self::Q5_K | Self::Q6_K | Self::IQ4_XS => {
                Some(Self::Q8_K)
            }
            Self::Q8_1 | Self::Q8_K => None,
        }
    }
}

/// Dequantizes one row of `dst.len()` elements of type `ty` from `src`.
///
/// # Panics
/// If `src.len() != ty.row_bytes(dst.len())`. Callers validate tensor shapes at load time, so
/// a mismatch here is a bug, not bad input.
pub fn dequantize_row(ty: GgmlType, src: &[u8], dst: &mut [f32]) {
    assert_eq!(
        Some(src.len()),
        ty.row_bytes(dst.len()),
        "{ty} row of {} elements",
        dst.len()
    );
    dispatch::dequantizer(ty)(src, dst);
}

/// Quantizes one row of `src.len()` elements to `ty` with ggml's reference quantizer
/// (`quantize_row_*_ref`; the k-quants follow it with the same scale searches; IQ4_NL/IQ4_XS
/// use a plain nearest-grid fit, enough to write test files).
///
/// # Panics
/// If `dst.len() != ty.row_bytes(src.len())`.
pub fn quantize_row(ty: GgmlType, src: &[f32], dst: &mut [u8]) {
    assert_eq!(
        Some(dst.len()),
        ty.row_bytes(src.len()),
        "{ty} row of {} elements",
        src.len()
    );
    dispatch::quantizer(ty)(src, dst);
}

/// Quantizes one activation row to `vdt` (a [`GgmlType::vec_dot_type`]) exactly as ggml-cpu
/// does on x86 before its dot products, which differs from [`quantize_row`] only in rounding
/// ties for Q8_0/Q8_1. Matching it keeps logits close to llama.cpp's.
///
/// # Panics
/// If `dst.len() != vdt.row_bytes(src.len())`.
pub fn quantize_activations(vdt: GgmlType, src: &[f32], dst: &mut [u8]) {
    quantize_activations_at(crate::cpu::simd_level(), vdt, src, dst);
}

/// [`quantize_activations`] with the kernels of `level` (all levels give identical bytes).
///
/// # Panics
/// As [`quantize_activations`], or if this CPU cannot run `level`.
pub fn quantize_activations_at(level: SimdLevel, vdt: GgmlType, src: &[f32], dst: &mut [u8]) {
    assert_eq!(
        Some(dst.len()),
        vdt.row_bytes(src.len()),
        "{vdt} row of {} elements",
        src.len()
    );
    dispatch::activation_quantizer(vdt, level)(src, dst);
}

/// Dot product of weight row `w` (type `ty`) with activation row `a`, already converted to
/// `ty.vec_dot_type()` (see [`quantize_activations`]), using the kernels of `level`.
///
/// # Panics
/// If `ty` has no vec_dot_type, the row lengths disagree, or this CPU cannot run `level`.
pub fn vec_dot(level: SimdLevel, ty: GgmlType, w: &[u8], a: &[u8]) -> f32 {
    let (kernels, vdt) = match (dispatch::dot_kernels(ty, level), ty.vec_dot_type()) {
        (Some(k), Some(v)) => (k, v),
        _ => panic!("{ty} is an activation format, not a weight type"),
    };
    let n = w.len() / ty.type_size() * ty.block_size();
    assert_eq!(Some(w.len()), ty.row_bytes(n), "{ty} weight row");
    assert_eq!(
        Some(a.len()),
        vdt.row_bytes(n),
        "{vdt} activation row of {n} elements"
    );
    let mut out = [0.0f32];
    (kernels.one)(w, a, &mut out);
    out[0]
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
