//! What the pinned block hash costs: one 16-token block, and a 2,048-token prompt (128 blocks,
//! what a long prefill hashes at admission). Compared with a step's time in docs/benchmarks.md.

#![allow(clippy::unwrap_used)] // benches may unwrap

use criterion::{Criterion, criterion_group, criterion_main};
use pagoda_core::kv::ExtraKeys;
use pagoda_core::kv::block_hash::{DEFAULT_HASH_SEED, root_hash};
use std::hint::black_box;

fn bench(c: &mut Criterion) {
    let chain = ExtraKeys::default().chain(root_hash(DEFAULT_HASH_SEED));
    let tokens: Vec<u32> = (0..2048u32)
        .map(|i| i.wrapping_mul(2_654_435_761) % 151_000)
        .collect();
    c.bench_function("block_hash/one_block_16", |b| {
        b.iter(|| {
            let mut out = Vec::with_capacity(1);
            chain.extend(&mut out, black_box(&tokens[..16]), 16);
            out
        })
    });
    c.bench_function("block_hash/prompt_2048_tokens", |b| {
        b.iter(|| {
            let mut out = Vec::with_capacity(128);
            chain.extend(&mut out, black_box(&tokens), 16);
            out
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
