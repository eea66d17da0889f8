//! The weight stream of one batch-1 decode step, without the rest of the model: every packed
//! matrix of a model's layers (distinct memory, far more than the L3) and its LM head, multiplied
//! by one activation row in the order the forward pass runs them. Reports ms per step and the
//! weight bytes per second. Each step alternates with a plain read of as many bytes
//! (`pagoda_kernels::bandwidth`), so the stream rate is set against the read bandwidth of the
//! same moment. Not criterion: a step is milliseconds and the figure wanted is the ratio.
//!
//! `cargo bench -p pagoda-benches --bench decode_stream -- [smollm2|gemma3] [STEPS]`;
//! `PAGODA_THREADS=n` sizes the pool (default 2).

use pagoda_kernels::bandwidth::ReadProbe;
use pagoda_kernels::matmul::{MatmulScratch, matmul_packed};
use pagoda_kernels::parallel;
use pagoda_kernels::quant::packed::PackedMatrix;
use pagoda_kernels::quant::{GgmlType, quantize_row};
use std::hint::black_box;
use std::time::Instant;

/// One matrix per layer and projection: (type, rows, cols).
struct Shape {
    layers: usize,
    per_layer: Vec<(GgmlType, usize, usize)>,
    lm_head: (GgmlType, usize, usize),
}

fn shape(model: &str) -> Option<Shape> {
    use GgmlType::*;
    match model {
        // qkv stacked, o, gate/up stacked, down; tied Q8_0 embedding as LM head.
        "smollm2" => Some(Shape {
            layers: 30,
            per_layer: vec![
                (Q4_1, 960, 576),
                (Q4_1, 576, 576),
                (Q4_1, 3072, 576),
                (Q4_1, 576, 1536),
            ],
            lm_head: (Q8_0, 49152, 576),
        }),
        // Q5_0 q/k/v (stacked), Q4_K o, Q5_0 gate/up, Q4_K down. The file's Q6_K down and Q8_0 v
        // in its 9 "more bits" layers are left out: within ~2% of the real model's bytes.
        "gemma3" => Some(Shape {
            layers: 18,
            per_layer: vec![
                (Q5_0, 1536, 640),
                (Q4_K, 640, 1024),
                (Q5_0, 4096, 640),
                (Q4_K, 640, 2048),
            ],
            lm_head: (Q8_0, 262144, 640),
        }),
        _ => None,
    }
}

/// `n` x `k` quantized from a fixed pattern (the values do not change the speed).
fn packed(ty: GgmlType, n: usize, k: usize, seed: usize) -> PackedMatrix {
    let row = ty.row_bytes(k).unwrap_or(0);
    let mut one = vec![0u8; row];
    let src: Vec<f32> = (0..k)
        .map(|i| (((i + 31 * seed) * 7919 % 1000) as f32 / 500.0) - 1.0)
        .collect();
    quantize_row(ty, &src, &mut one);
    let w: Vec<u8> = one.iter().copied().cycle().take(n * row).collect();
    match PackedMatrix::pack(ty, n, k, &w) {
        Some(p) => p,
        None => panic!("{ty} has no packed kernels"),
    }
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let model = args.first().map_or("smollm2", String::as_str);
    let steps: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(200);
    let threads = std::env::var("PAGODA_THREADS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(2);
    parallel::set_num_threads(threads);
    let Some(s) = shape(model) else {
        eprintln!("unknown model {model}: smollm2 or gemma3");
        std::process::exit(2);
    };
    let mut mats = Vec::new();
    for il in 0..s.layers {
        for (i, &(ty, n, k)) in s.per_layer.iter().enumerate() {
            mats.push(packed(ty, n, k, il * 8 + i));
        }
    }
    let (ty, n, k) = s.lm_head;
    mats.push(packed(ty, n, k, 999));
    let bytes: usize = mats.iter().map(PackedMatrix::len_bytes).sum();
    let widest = mats
        .iter()
        .map(|m| m.rows().max(m.cols()))
        .max()
        .unwrap_or(0);
    let x: Vec<f32> = (0..widest)
        .map(|i| ((i * 13 % 100) as f32 / 50.0) - 1.0)
        .collect();
    let mut y = vec![0f32; widest];
    let mut scratch = MatmulScratch::default();
    let mut step = |mats: &[PackedMatrix]| {
        for m in mats {
            matmul_packed(
                black_box(m),
                &x[..m.cols()],
                1,
                &mut y[..m.rows()],
                &mut scratch,
            );
        }
    };
    for _ in 0..3 {
        step(&mats);
    }
    let probe = match ReadProbe::new(bytes, threads) {
        Ok(p) => p,
        Err(e) => panic!("read probe: {e}"),
    };
    let head = mats.len() - 1;
    let mut times = Vec::with_capacity(steps);
    let mut head_times = Vec::with_capacity(steps);
    let mut reads = Vec::with_capacity(steps);
    let mut ratios = Vec::with_capacity(steps);
    for _ in 0..steps {
        let read = probe.measure();
        let t0 = Instant::now();
        step(&mats[..head]);
        let t1 = Instant::now();
        step(&mats[head..]);
        let secs = t0.elapsed().as_secs_f64();
        times.push(secs);
        head_times.push(t1.elapsed().as_secs_f64());
        reads.push(read);
        ratios.push(bytes as f64 / secs / read);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (step_s, head_s) = (median(&mut times), median(&mut head_times));
    let (read, ratio) = (median(&mut reads), median(&mut ratios));
    let head_bytes = mats[head].len_bytes();
    println!(
        "{model}, {threads} threads: {:.0} MB/step, median step {:.3} ms ({:.1} GB/s); layers {:.3} ms ({:.1} GB/s), LM head {:.3} ms ({:.1} GB/s)",
        bytes as f64 / 1e6,
        step_s * 1e3,
        bytes as f64 / step_s / 1e9,
        (step_s - head_s) * 1e3,
        (bytes - head_bytes) as f64 / (step_s - head_s) / 1e9,
        head_s * 1e3,
        head_bytes as f64 / head_s / 1e9,
    );
    println!(
        "plain read of {:.0} MB: median {:.1} GB/s; weight stream / read (median over steps): {:.0}%",
        bytes as f64 / 1e6,
        read / 1e9,
        ratio * 100.0
    );
}
