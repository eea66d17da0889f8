//! pagoda-kernels: the CPU backend. Compute on plain slices: GGML-compatible quantized block
//! formats and their dot products, batched matmul, norms, RoPE, activations, softmax and paged
//! attention. Every kernel has a scalar reference; SIMD variants are picked at run time from
//! CPU features (never `target-cpu=native`) and tested against the scalar one.

pub mod attention;
pub mod bandwidth;
pub mod cpu;
pub mod gemm;
mod huge_pages;
pub mod lora;
pub mod matmul;
pub mod ops;
pub mod parallel;
pub mod quant;
