//! One encoder GEMM shape (or a roof) on one thread, its rate per second of the thread's own
//! CPU time (`/proc/thread-self/schedstat`, Linux) beside the wall-clock rate. On a machine
//! other processes share, wall time counts the time the thread waited for a core; CPU time
//! does not, so GEMM / roof ratios stay stable under load (criterion's `--bench gemm` reads
//! wall time). `docs/benchmarks.md` "Encoder GEMMs on the AMD EPYC" runs it as:
//!
//! ```text
//! cargo build --release -p pagoda-benches --example gemm_cpu
//! target/release/examples/gemm_cpu roof_int8 200           # or roof_f32
//! target/release/examples/gemm_cpu q8_0 100 1536 384 256   # or f32; ITERS N K M
//! ```

#![allow(clippy::unwrap_used)] // a measuring tool: bad arguments may panic

#[path = "../benches/common/mod.rs"]
mod common;

use common::Roof;
use pagoda_kernels::gemm::{F32Panels, gemm_f32};
use pagoda_kernels::matmul::{MatmulScratch, matmul_packed};
use pagoda_kernels::parallel;
use pagoda_kernels::quant::packed::PackedMatrix;
use pagoda_kernels::quant::{GgmlType, quantize_row};
use std::time::Instant;

fn values(len: usize, seed: usize) -> Vec<f32> {
    (0..len)
        .map(|i| (((i * 7919 + seed) % 1000) as f32 / 500.0) - 1.0)
        .collect()
}

/// Nanoseconds this thread has run on a CPU.
fn cpu_ns() -> u64 {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap();
    s.split_whitespace().next().unwrap().parse().unwrap()
}

fn main() {
    // One thread: every task runs on this one, so its CPU time is the whole product's.
    parallel::set_num_threads(1);
    let args: Vec<String> = std::env::args().collect();
    let what = args[1].as_str();
    let iters: usize = args[2].parse().unwrap();
    let mut job: Box<dyn FnMut()>;
    let ops: f64;
    if let Some(roof) = match what {
        "roof_f32" => Some(Roof::F32Fma),
        "roof_int8" => Some(Roof::Int8Pair),
        _ => None,
    } {
        ops = (roof.ops(1) * iters as u64) as f64;
        job = Box::new(move || roof.run(1));
    } else {
        let dim = |i: usize| -> usize { args[i].parse().unwrap() };
        let (n, k, m) = (dim(3), dim(4), dim(5));
        let (w, x) = (values(n * k, 1), values(m * k, 2));
        let mut y = vec![0f32; m * n];
        ops = (2 * m * n * k * iters) as f64;
        if what == "f32" {
            let p = F32Panels::from_rows(n, k, &w);
            job = Box::new(move || gemm_f32(&p, &x, m, &mut y));
        } else {
            let row = GgmlType::Q8_0.row_bytes(k).unwrap();
            let mut q = vec![0u8; n * row];
            for (s, d) in w.chunks_exact(k).zip(q.chunks_exact_mut(row)) {
                quantize_row(GgmlType::Q8_0, s, d);
            }
            let p = PackedMatrix::pack(GgmlType::Q8_0, n, k, &q).unwrap();
            let mut scratch = MatmulScratch::default();
            job = Box::new(move || matmul_packed(&p, &x, m, &mut y, &mut scratch));
        }
    }
    job(); // warm: weights and scratch in cache, pages touched
    let (wall, cpu) = (Instant::now(), cpu_ns());
    for _ in 0..iters {
        job();
    }
    let cpu = (cpu_ns() - cpu) as f64 / 1e9;
    let wall = wall.elapsed().as_secs_f64();
    println!(
        "{what} {:.1} GOP/s per CPU-second ({:.1} wall, on a CPU {:.0}% of the time)",
        ops / cpu / 1e9,
        ops / wall / 1e9,
        100.0 * cpu / wall
    );
}
