//! The float element types F32, F16 and BF16: conversion to and from f32 and scalar dot
//! products against f32 activations (stored little-endian as bytes, like every other row).

use half::f16;

#[inline(always)]
pub(crate) fn f32_at(b: &[u8], i: usize) -> f32 {
    f32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]])
}

#[inline(always)]
fn bf16_to_f32(lo: u8, hi: u8) -> f32 {
    f32::from_bits((u16::from_le_bytes([lo, hi]) as u32) << 16)
}

/// f32 to bf16 bits, round to nearest even, quieting NaNs (ggml_compute_fp32_to_bf16).
fn f32_to_bf16(v: f32) -> u16 {
    let u = v.to_bits();
    if (u & 0x7fff_ffff) > 0x7f80_0000 {
        return ((u >> 16) | 64) as u16;
    }
    ((u + (0x7fff + ((u >> 16) & 1))) >> 16) as u16
}

pub(crate) fn dequantize_f32(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(4).zip(dst) {
        *y = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    }
}

pub(crate) fn dequantize_f16(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(2).zip(dst) {
        *y = f16::from_le_bytes([b[0], b[1]]).to_f32();
    }
}

pub(crate) fn dequantize_bf16(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(2).zip(dst) {
        *y = bf16_to_f32(b[0], b[1]);
    }
}

pub(crate) fn quantize_f32(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.iter().zip(dst.chunks_exact_mut(4)) {
        b.copy_from_slice(&x.to_le_bytes());
    }
}

pub(crate) fn quantize_f16(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.iter().zip(dst.chunks_exact_mut(2)) {
        b.copy_from_slice(&f16::from_f32(*x).to_le_bytes());
    }
}

pub(crate) fn quantize_bf16(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.iter().zip(dst.chunks_exact_mut(2)) {
        b.copy_from_slice(&f32_to_bf16(*x).to_le_bytes());
    }
}

/// F32 weights . f32 activations.
pub(crate) fn dot_f32(w: &[u8], a: &[u8]) -> f32 {
    let n = w.len() / 4;
    (0..n).map(|i| f32_at(w, i) * f32_at(a, i)).sum()
}

/// F16 weights . f32 activations. (ggml converts activations to f16 for this dot; pagoda keeps
/// them f32, which is at least as accurate. No model file used here has F16 matrices.)
pub(crate) fn dot_f16(w: &[u8], a: &[u8]) -> f32 {
    w.chunks_exact(2)
        .enumerate()
        .map(|(i, b)| f16::from_le_bytes([b[0], b[1]]).to_f32() * f32_at(a, i))
        .sum()
}

/// BF16 weights . f32 activations.
pub(crate) fn dot_bf16(w: &[u8], a: &[u8]) -> f32 {
    w.chunks_exact(2)
        .enumerate()
        .map(|(i, b)| bf16_to_f32(b[0], b[1]) * f32_at(a, i))
        .sum()
}
