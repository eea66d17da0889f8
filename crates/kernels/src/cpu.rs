//! Run-time CPU feature detection, done once. Kernels ask here which variant to run, so a binary
//! built for generic x86-64 still uses AVX2+FMA where the machine has them.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU8, Ordering};

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

/// AVX-VNNI state: 0 not yet detected, 1 off, 2 on.
static VNNI: AtomicU8 = AtomicU8::new(0);

/// Whether the int8 kernels may use AVX-VNNI (`vpdpbusd` on ymm: 32 int8 multiply-adds in one
/// instruction, where AVX2 needs `vpsignb` + `vpmaddubsw` + `vpmaddwd` + `vpaddd`): the CPU has
/// it, the SIMD level is AVX2 and `PAGODA_NO_VNNI` is unset or 0. Its kernels give the AVX2
/// ones' bits exactly (the integer sums are exact either way), so this only changes speed.
pub fn avx_vnni() -> bool {
    match VNNI.load(Ordering::Relaxed) {
        0 => {
            let on = simd_level() == SimdLevel::Avx2
                && std::env::var_os("PAGODA_NO_VNNI").is_none_or(|v| v == "0")
                && detect_vnni();
            VNNI.store(if on { 2 } else { 1 }, Ordering::Relaxed);
            on
        }
        v => v == 2,
    }
}

/// Turns the AVX-VNNI kernels off (or back on, where the CPU has them): for tests and A/B
/// benches of the two int8 paths, which give the same bits.
pub fn set_avx_vnni(enabled: bool) {
    let on = enabled && simd_level() == SimdLevel::Avx2 && detect_vnni();
    VNNI.store(if on { 2 } else { 1 }, Ordering::Relaxed);
}

#[cfg(target_arch = "x86_64")]
fn detect_vnni() -> bool {
    is_x86_feature_detected!("avxvnni")
}

#[cfg(not(target_arch = "x86_64"))]
fn detect_vnni() -> bool {
    false
}

/// Every level this CPU can run, scalar first: tests run each kernel on each of them.
pub fn available_levels() -> Vec<SimdLevel> {
    let mut v = vec![SimdLevel::Scalar];
    if detect() == SimdLevel::Avx2 {
        v.push(SimdLevel::Avx2);
    }
    v
}
