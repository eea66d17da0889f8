//! Picks the row kernels for a (type, SIMD level) pair: dequantize, quantize, and the weight-row
//! dot products against 1 or 4 activation rows that `matmul` runs.

use super::{GgmlType, avx2, avx2_iq4, avx2_k_low, float, iq4, k_quants, k_quants_low, legacy};
use crate::cpu::SimdLevel;

/// `out[r] = w . a_r` for `r < out.len()`, the activation rows stored back to back in `a`
/// (each `vec_dot_type().row_bytes(k)` long). Only `out.len()` of 1 or [`ROWS`] is used.
pub(crate) type RowsDot = fn(w: &[u8], a: &[u8], out: &mut [f32]);

/// Activation rows a multi-row kernel takes at once.
pub(crate) const ROWS: usize = 4;

/// The dot kernels of one weight type at one SIMD level.
#[derive(Clone, Copy)]
pub(crate) struct DotKernels {
    /// Against one activation row.
    pub one: RowsDot,
    /// Against [`ROWS`] activation rows.
    pub four: RowsDot,
}

/// Scalar multi-row wrapper around a single-row reference dot.
macro_rules! scalar_rows {
    ($name:ident, $dot:path) => {
        fn $name(w: &[u8], a: &[u8], out: &mut [f32]) {
            let stride = a.len() / out.len();
            for (r, o) in out.iter_mut().enumerate() {
                *o = $dot(w, &a[r * stride..(r + 1) * stride]);
            }
        }
    };
}

scalar_rows!(scalar_f32, float::dot_f32);
scalar_rows!(scalar_f16, float::dot_f16);
scalar_rows!(scalar_bf16, float::dot_bf16);
scalar_rows!(scalar_q4_0, legacy::dot_q4_0_q8_0);
scalar_rows!(scalar_q4_1, legacy::dot_q4_1_q8_1);
scalar_rows!(scalar_q5_0, legacy::dot_q5_0_q8_0);
scalar_rows!(scalar_q8_0, legacy::dot_q8_0_q8_0);
scalar_rows!(scalar_q4_k, k_quants::dot_q4_k_q8_k);
scalar_rows!(scalar_q5_1, legacy::dot_q5_1_q8_1);
scalar_rows!(scalar_q2_k, k_quants_low::dot_q2_k_q8_k);
scalar_rows!(scalar_q3_k, k_quants_low::dot_q3_k_q8_k);
scalar_rows!(scalar_q5_k, k_quants_low::dot_q5_k_q8_k);
scalar_rows!(scalar_iq4_nl, iq4::dot_iq4_nl_q8_0);
scalar_rows!(scalar_iq4_xs, iq4::dot_iq4_xs_q8_k);
scalar_rows!(scalar_q6_k, k_quants::dot_q6_k_q8_k);

/// Safe entry to an AVX2 kernel for `R` rows. `$wb`/`$ab` are the weight and activation bytes
/// per element or block; the lengths are checked here so the kernel can use raw pointers.
macro_rules! avx2_rows {
    ($name:ident, $m:ident :: $kernel:ident, $r:literal, $wb:literal, $ab:literal) => {
        fn $name(w: &[u8], a: &[u8], out: &mut [f32]) {
            let nb = w.len() / $wb;
            assert!(
                w.len() == nb * $wb && a.len() == $r * nb * $ab && out.len() == $r,
                "dot kernel lengths do not match"
            );
            // SAFETY: these wrappers are only reachable through `dot_kernels(_, Avx2)`, which
            // `level_supported` guards, so the CPU has AVX2+FMA+F16C; lengths checked above.
            unsafe { $m::$kernel::<$r>(w, a, out) }
        }
    };
}

avx2_rows!(avx2_f32_1, avx2::dot_f32, 1, 4, 4);
avx2_rows!(avx2_f32_4, avx2::dot_f32, 4, 4, 4);
avx2_rows!(avx2_f16_1, avx2::dot_f16, 1, 2, 4);
avx2_rows!(avx2_f16_4, avx2::dot_f16, 4, 2, 4);
avx2_rows!(avx2_bf16_1, avx2::dot_bf16, 1, 2, 4);
avx2_rows!(avx2_bf16_4, avx2::dot_bf16, 4, 2, 4);
avx2_rows!(avx2_q4_0_1, avx2::dot_q4_0, 1, 18, 34);
avx2_rows!(avx2_q4_0_4, avx2::dot_q4_0, 4, 18, 34);
avx2_rows!(avx2_q4_1_1, avx2::dot_q4_1, 1, 20, 36);
avx2_rows!(avx2_q4_1_4, avx2::dot_q4_1, 4, 20, 36);
avx2_rows!(avx2_q5_0_1, avx2::dot_q5_0, 1, 22, 34);
avx2_rows!(avx2_q5_0_4, avx2::dot_q5_0, 4, 22, 34);
avx2_rows!(avx2_q8_0_1, avx2::dot_q8_0, 1, 34, 34);
avx2_rows!(avx2_q8_0_4, avx2::dot_q8_0, 4, 34, 34);
avx2_rows!(avx2_q4_k_1, avx2::dot_q4_k, 1, 144, 292);
avx2_rows!(avx2_q4_k_4, avx2::dot_q4_k, 4, 144, 292);
avx2_rows!(avx2_q6_k_1, avx2::dot_q6_k, 1, 210, 292);
avx2_rows!(avx2_q6_k_4, avx2::dot_q6_k, 4, 210, 292);
avx2_rows!(avx2_q5_1_1, avx2::dot_q5_1, 1, 24, 36);
avx2_rows!(avx2_q5_1_4, avx2::dot_q5_1, 4, 24, 36);
avx2_rows!(avx2_q5_k_1, avx2::dot_q5_k, 1, 176, 292);
avx2_rows!(avx2_q5_k_4, avx2::dot_q5_k, 4, 176, 292);
avx2_rows!(avx2_q2_k_1, avx2_k_low::dot_q2_k, 1, 84, 292);
avx2_rows!(avx2_q2_k_4, avx2_k_low::dot_q2_k, 4, 84, 292);
avx2_rows!(avx2_q3_k_1, avx2_k_low::dot_q3_k, 1, 110, 292);
avx2_rows!(avx2_q3_k_4, avx2_k_low::dot_q3_k, 4, 110, 292);
avx2_rows!(avx2_iq4_nl_1, avx2_iq4::dot_iq4_nl, 1, 18, 34);
avx2_rows!(avx2_iq4_nl_4, avx2_iq4::dot_iq4_nl, 4, 18, 34);
avx2_rows!(avx2_iq4_xs_1, avx2_iq4::dot_iq4_xs, 1, 136, 292);
avx2_rows!(avx2_iq4_xs_4, avx2_iq4::dot_iq4_xs, 4, 136, 292);

/// Whether this CPU can run `level` (the AVX2 kernels need AVX2, FMA and F16C).
pub(crate) fn level_supported(level: SimdLevel) -> bool {
    match level {
        SimdLevel::Scalar => true,
        #[cfg(target_arch = "x86_64")]
        SimdLevel::Avx2 => {
            is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
                && is_x86_feature_detected!("f16c")
        }
        #[cfg(not(target_arch = "x86_64"))]
        SimdLevel::Avx2 => false,
    }
}

/// The dot kernels for weights of type `ty` at `level`; `None` for the activation-only types
/// Q8_1 and Q8_K. Panics if the CPU cannot run `level` (a caller bug: levels come from
/// `cpu::simd_level()` or `cpu::available_levels()`).
pub(crate) fn dot_kernels(ty: GgmlType, level: SimdLevel) -> Option<DotKernels> {
    assert!(
        level_supported(level),
        "SIMD level {level:?} is not supported by this CPU"
    );
    let k = |one: RowsDot, four: RowsDot| Some(DotKernels { one, four });
    let s = |f: RowsDot| Some(DotKernels { one: f, four: f });
    match (level, ty) {
        (_, GgmlType::Q8_1 | GgmlType::Q8_K) => None,
        (SimdLevel::Scalar, GgmlType::F32) => s(scalar_f32),
        (SimdLevel::Scalar, GgmlType::F16) => s(scalar_f16),
        (SimdLevel::Scalar, GgmlType::BF16) => s(scalar_bf16),
        (SimdLevel::Scalar, GgmlType::Q4_0) => s(scalar_q4_0),
        (SimdLevel::Scalar, GgmlType::Q4_1) => s(scalar_q4_1),
        (SimdLevel::Scalar, GgmlType::Q5_0) => s(scalar_q5_0),
        (SimdLevel::Scalar, GgmlType::Q8_0) => s(scalar_q8_0),
        (SimdLevel::Scalar, GgmlType::Q4_K) => s(scalar_q4_k),
        (SimdLevel::Scalar, GgmlType::Q6_K) => s(scalar_q6_k),
        (SimdLevel::Scalar, GgmlType::Q5_1) => s(scalar_q5_1),
        (SimdLevel::Scalar, GgmlType::Q2_K) => s(scalar_q2_k),
        (SimdLevel::Scalar, GgmlType::Q3_K) => s(scalar_q3_k),
        (SimdLevel::Scalar, GgmlType::Q5_K) => s(scalar_q5_k),
        (SimdLevel::Scalar, GgmlType::IQ4_NL) => s(scalar_iq4_nl),
        (SimdLevel::Scalar, GgmlType::IQ4_XS) => s(scalar_iq4_xs),
        (SimdLevel::Avx2, GgmlType::F32) => k(avx2_f32_1, avx2_f32_4),
        (SimdLevel::Avx2, GgmlType::F16) => k(avx2_f16_1, avx2_f16_4),
        (SimdLevel::Avx2, GgmlType::BF16) => k(avx2_bf16_1, avx2_bf16_4),
        (SimdLevel::Avx2, GgmlType::Q4_0) => k(avx2_q4_0_1, avx2_q4_0_4),
        (SimdLevel::Avx2, GgmlType::Q4_1) => k(avx2_q4_1_1, avx2_q4_1_4),
        (SimdLevel::Avx2, GgmlType::Q5_0) => k(avx2_q5_0_1, avx2_q5_0_4),
        (SimdLevel::Avx2, GgmlType::Q8_0) => k(avx2_q8_0_1, avx2_q8_0_4),
        (SimdLevel::Avx2, GgmlType::Q4_K) => k(avx2_q4_k_1, avx2_q4_k_4),
        (SimdLevel::Avx2, GgmlType::Q6_K) => k(avx2_q6_k_1, avx2_q6_k_4),
        (SimdLevel::Avx2, GgmlType::Q5_1) => k(avx2_q5_1_1, avx2_q5_1_4),
        (SimdLevel::Avx2, GgmlType::Q2_K) => k(avx2_q2_k_1, avx2_q2_k_4),
        (SimdLevel::Avx2, GgmlType::Q3_K) => k(avx2_q3_k_1, avx2_q3_k_4),
        (SimdLevel::Avx2, GgmlType::Q5_K) => k(avx2_q5_k_1, avx2_q5_k_4),
        (SimdLevel::Avx2, GgmlType::IQ4_NL) => k(avx2_iq4_nl_1, avx2_iq4_nl_4),
        (SimdLevel::Avx2, GgmlType::IQ4_XS) => k(avx2_iq4_xs_1, avx2_iq4_xs_4),
    }
}

/// Row dequantizer for `ty`.
pub(crate) fn dequantizer(ty: GgmlType) -> fn(&[u8], &mut [f32]) {
    match ty {
        GgmlType::F32 => float::dequantize_f32,
        GgmlType::F16 => float::dequantize_f16,
        GgmlType::BF16 => float::dequantize_bf16,
        GgmlType::Q4_0 => legacy::dequantize_q4_0,
        GgmlType::Q4_1 => legacy::dequantize_q4_1,
        GgmlType::Q5_0 => legacy::dequantize_q5_0,
        GgmlType::Q8_0 => legacy::dequantize_q8_0,
        GgmlType::Q8_1 => legacy::dequantize_q8_1,
        GgmlType::Q4_K => k_quants::dequantize_q4_k,
        GgmlType::Q6_K => k_quants::dequantize_q6_k,
        GgmlType::Q5_1 => legacy::dequantize_q5_1,
        GgmlType::Q2_K => k_quants_low::dequantize_q2_k,
        GgmlType::Q3_K => k_quants_low::dequantize_q3_k,
        GgmlType::Q5_K => k_quants_low::dequantize_q5_k,
        GgmlType::IQ4_NL => iq4::dequantize_iq4_nl,
        GgmlType::IQ4_XS => iq4::dequantize_iq4_xs,
        GgmlType::Q8_K => k_quants::dequantize_q8_k,
    }
}

/// Reference row quantizer for `ty`.
pub(crate) fn quantizer(ty: GgmlType) -> fn(&[f32], &mut [u8]) {
    match ty {
        GgmlType::F32 => float::quantize_f32,
        GgmlType::F16 => float::quantize_f16,
        GgmlType::BF16 => float::quantize_bf16,
        GgmlType::Q4_0 => legacy::quantize_q4_0,
        GgmlType::Q4_1 => legacy::quantize_q4_1,
        GgmlType::Q5_0 => legacy::quantize_q5_0,
        GgmlType::Q8_0 => legacy::quantize_q8_0,
        GgmlType::Q8_1 => legacy::quantize_q8_1,
        GgmlType::Q4_K => k_quants::quantize_q4_k,
        GgmlType::Q6_K => k_quants::quantize_q6_k,
        GgmlType::Q5_1 => legacy::quantize_q5_1,
        GgmlType::Q2_K => k_quants_low::quantize_q2_k,
        GgmlType::Q3_K => k_quants_low::quantize_q3_k,
        GgmlType::Q5_K => k_quants_low::quantize_q5_k,
        GgmlType::IQ4_NL => iq4::quantize_iq4_nl,
        GgmlType::IQ4_XS => iq4::quantize_iq4_xs,
        GgmlType::Q8_K => k_quants::quantize_q8_k,
    }
}

/// AVX2 activation quantizers behind a length check.
fn avx2_act_q8_0(src: &[f32], dst: &mut [u8]) {
    assert!(
        src.len().is_multiple_of(32) && dst.len() == src.len() / 32 * 34,
        "Q8_0 row lengths"
    );
    // SAFETY: only handed out by `activation_quantizer(_, Avx2)`, which checks CPU support.
    unsafe { avx2::quantize_act_q8_0(src, dst) }
}

fn avx2_act_q8_1(src: &[f32], dst: &mut [u8]) {
    assert!(
        src.len().is_multiple_of(32) && dst.len() == src.len() / 32 * 36,
        "Q8_1 row lengths"
    );
    // SAFETY: as above.
    unsafe { avx2::quantize_act_q8_1(src, dst) }
}

fn avx2_q8_k(src: &[f32], dst: &mut [u8]) {
    assert!(
        src.len().is_multiple_of(256) && dst.len() == src.len() / 256 * 292,
        "Q8_K row lengths"
    );
    // SAFETY: as above.
    unsafe { avx2::quantize_q8_k(src, dst) }
}

/// Activation quantizer for `vdt` (a `vec_dot_type`) at `level`: ggml-cpu's x86 variants for
/// Q8_0/Q8_1, quantize_row_q8_K_ref for Q8_K (as ggml-cpu on x86), the reference quantizer
/// otherwise. The AVX2 variants are bit-exact with the scalar ones.
pub(crate) fn activation_quantizer(vdt: GgmlType, level: SimdLevel) -> fn(&[f32], &mut [u8]) {
    assert!(
        level_supported(level),
        "SIMD level {level:?} is not supported by this CPU"
    );
    match (level, vdt) {
        (SimdLevel::Avx2, GgmlType::Q8_0) => avx2_act_q8_0,
        (SimdLevel::Avx2, GgmlType::Q8_1) => avx2_act_q8_1,
        (SimdLevel::Avx2, GgmlType::Q8_K) => avx2_q8_k,
        (_, GgmlType::Q8_0) => legacy::quantize_act_q8_0,
        (_, GgmlType::Q8_1) => legacy::quantize_act_q8_1,
        (_, other) => quantizer(other),
    }
}
