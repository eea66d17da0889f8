//! Forward-pass throughput on the real models: prompt processing of 512 tokens and decoding one
//! token at a context of 128. The kernels' thread pool is sized once per process, so run the
//! bench once per thread count: `PAGODA_THREADS=1 cargo bench -p pagoda-benches --bench forward` (default 2).
#![allow(clippy::unwrap_used)]

use std::time::Duration;

mod fixtures;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use pagoda_model::{CpuExecutor, ForwardBatch, Logits, Model, SeqChunk};

fn bench_model(c: &mut Criterion, label: &str, file: &str) {
    let threads = pagoda_kernels::parallel::num_threads();
    let model = Model::open(&fixtures::model_path(file)).unwrap();
    let vocab = model.config().vocab_size as u32;
    let bs = 16;
    let table: Vec<u32> = (0..40).collect();
    let mut exec = CpuExecutor::new(model, 40, bs).unwrap();
    let tokens: Vec<u32> = (0..512u32)
        .map(|i| 100 + (i * 7919) % (vocab - 200))
        .collect();

    let mut group = c.benchmark_group(format!("{label}/{threads}t"));
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(15))
        .warm_up_time(Duration::from_secs(2));
    group.throughput(Throughput::Elements(512));
    let prefill = ForwardBatch::from_seqs(
        &[SeqChunk {
            tokens: &tokens,
            start: 0,
            block_tables: std::slice::from_ref(&table),
            logits: Logits::Last,
        }],
        bs,
    );
    group.bench_function("prefill_512", |b| {
        b.iter(|| exec.forward(&prefill).unwrap()[0])
    });

    let ctx = 128;
    let warm = ForwardBatch::from_seqs(
        &[SeqChunk {
            tokens: &tokens[..ctx - 1],
            start: 0,
            block_tables: std::slice::from_ref(&table),
            logits: Logits::Last,
        }],
        bs,
    );
    exec.forward(&warm).unwrap();
    let step = ForwardBatch::from_seqs(
        &[SeqChunk {
            tokens: &tokens[ctx - 1..ctx],
            start: ctx - 1,
            block_tables: std::slice::from_ref(&table),
            logits: Logits::Last,
        }],
        bs,
    );
    group.throughput(Throughput::Elements(1));
    group.bench_function("decode_ctx128", |b| {
        b.iter(|| exec.forward(&step).unwrap()[0])
    });
    group.finish();
}

fn benches(c: &mut Criterion) {
    let threads = std::env::var("PAGODA_THREADS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(2);
    pagoda_kernels::parallel::set_num_threads(threads);
    bench_model(c, "smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf");
    bench_model(c, "gemma3", "gemma-3-270m-q4_k_m.gguf");
}

criterion_group!(forward, benches);
criterion_main!(forward);
