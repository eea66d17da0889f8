//! Element-wise and row-wise kernels of a transformer block: RMSNorm, RoPE, gated activations,
//! softmax and vector arithmetic. Each public function dispatches on `cpu::simd_level()`; the
//! `*_with(level, ..)` forms pick a variant explicitly so tests can compare every variant with
//! the scalar reference.

mod activation;
mod arith;
mod encoder;
mod gelu_erf;
mod logits;
pub(crate) mod math;
mod norm;
mod rope;
mod softmax;

pub use activation::{gelu_tanh_mul, gelu_tanh_mul_with, silu_mul, silu_mul_with};
pub use arith::{add_inplace, add_inplace_with, scale_inplace, scale_inplace_with};
pub use encoder::{
    bias_gelu_erf_rows, bias_residual_layer_norm_rows, gelu_erf_inplace, layer_norm_rows,
};
pub use gelu_erf::bias_gelu_erf_rows_with;
pub use logits::{
    count_equal, count_equal_with, count_greater, count_greater_with, exp_into, exp_into_with,
    exp_sum, exp_sum_with, find_greater, find_greater_with, max_ignoring_nan,
    max_ignoring_nan_with,
};
pub use norm::{rms_norm, rms_norm_inplace, rms_norm_inplace_with, rms_norm_rows, rms_norm_with};
pub use rope::{Rope, RopeStyle};
pub use softmax::{softmax_inplace, softmax_inplace_with};

use crate::cpu::SimdLevel;

/// Whether `level` asks for AVX2 and this CPU can run it. Guards the `*_with` entry points so a
/// caller passing `Avx2` on a machine without it gets the scalar path, not undefined behaviour.
#[inline]
pub(crate) fn use_avx2(level: SimdLevel) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        level == SimdLevel::Avx2
            && std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = level;
        false
    }
}
