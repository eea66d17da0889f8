//! Run-time CPU feature detection, done once. Kernels ask here which variant to run, so a binary
//! built for generic x86-64 still uses AVX2+FMA where the machine has them.

use std::sync::OnceLock;

/// The SIMD level the kernels dispatch on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SimdLevel {
    /// Portable Rust only.
    Scalar,
    /// x86-64 with AVX2, FMA and F16C.
    Avx2,
}

/// The best level this CPU supports. `PAGODA_FORCE_SCALAR=1` forces the scalar path (for
/// debugging and for comparing against the reference on a real model).
pub fn simd_level() -> SimdLevel {
    static LEVEL: OnceLock<SimdLevel> = OnceLock::new();
    *LEVEL.get_or_init(|| {
        if std::env::var_os("PAGODA_FORCE_SCALAR").is_some_and(|v| v != "0") {
            return SimdLevel::Scalar;
        }
        detect()
    })
}

#[cfg(target_arch = "x86_64")]
fn detect() -> SimdLevel {
    if is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
        && is_x86_feature_detected!("f16c")
    {
        SimdLevel::Avx2
    } else {
        SimdLevel::Scalar
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn detect() -> SimdLevel {
    SimdLevel::Scalar
}

/// Every level this CPU can run, scalar first: tests run each kernel on each of them.
pub fn available_levels() -> Vec<SimdLevel> {
    let mut v = vec![SimdLevel::Scalar];
    if detect() == SimdLevel::Avx2 {
        v.push(SimdLevel::Avx2);
    }
    v
}
