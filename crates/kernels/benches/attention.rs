//! Paged attention at the models' head configs: SmolLM2-135M (9 q / 3 kv heads of 64) and
//! gemma-3-270m (4 q / 1 kv head of 256). Decode: 1 query over 128/512/2048 tokens of context;
//! prefill: 512 new queries from an empty cache. Block size 16, shuffled block ids.

use criterion::{Criterion, criterion_group, criterion_main};
use pagoda_kernels::attention::{AttnBatch, KvLayout, paged_attention};
use std::hint::black_box;

struct Setup {
    layout: KvLayout,
    k: Vec<f32>,
    v: Vec<f32>,
    q: Vec<f32>,
    out: Vec<f32>,
    qsl: Vec<u32>,
    seq_lens: Vec<u32>,
    table: Vec<u32>,
}

fn setup(n_heads: usize, nkv: usize, hd: usize, context: usize, q_len: usize) -> Setup {
    let bs = 16;
    let blocks = context.div_ceil(bs);
    let layout = KvLayout {
        num_blocks: blocks,
        block_size: bs,
        num_kv_heads: nkv,
        head_dim: hd,
    };
    let fill = |n: usize, seed: usize| {
        (0..n)
            .map(|i| (((i + seed) * 2654435761) % 1000) as f32 / 1000.0 - 0.5)
            .collect::<Vec<f32>>()
    };
    // A fixed permutation: block j of the request lives at (j * 7) mod blocks when coprime.
    let step = if blocks % 7 == 0 { 1 } else { 7 };
    Setup {
        layout,
        k: fill(layout.arena_len(), 1),
        v: fill(layout.arena_len(), 2),
        q: fill(q_len * n_heads * hd, 3),
        out: vec![0.0; q_len * n_heads * hd],
        qsl: vec![0, q_len as u32],
        seq_lens: vec![context as u32],
        table: (0..blocks).map(|j| ((j * step) % blocks) as u32).collect(),
    }
}

fn bench_attention(c: &mut Criterion) {
    let models = [
        ("smollm_9x64_kv3", 9, 3, 64),
        ("gemma_4x256_kv1", 4, 1, 256),
    ];
    let mut g = c.benchmark_group("attention_decode");
    for (name, n_heads, nkv, hd) in models {
        for context in [128, 512, 2048] {
            let mut s = setup(n_heads, nkv, hd, context, 1);
            let scale = 1.0 / (hd as f32).sqrt();
            g.bench_function(format!("{name}/ctx{context}"), |b| {
                b.iter(|| {
                    let batch = AttnBatch {
                        query_start_loc: &s.qsl,
                        seq_lens: &s.seq_lens,
                        block_tables: &s.table,
                        max_blocks_per_seq: s.table.len(),
                    };
                    paged_attention(
                        &s.layout,
                        &s.k,
                        &s.v,
                        &batch,
                        black_box(&s.q),
                        n_heads,
                        scale,
                        None,
                        &mut s.out,
                    )
                })
            });
        }
    }
    g.finish();
    let mut g = c.benchmark_group("attention_prefill");
    g.sample_size(20);
    for (name, n_heads, nkv, hd) in models {
        let mut s = setup(n_heads, nkv, hd, 512, 512);
        let scale = 1.0 / (hd as f32).sqrt();
        g.bench_function(format!("{name}/q512"), |b| {
            b.iter(|| {
                let batch = AttnBatch {
                    query_start_loc: &s.qsl,
                    seq_lens: &s.seq_lens,
                    block_tables: &s.table,
                    max_blocks_per_seq: s.table.len(),
                };
                paged_attention(
                    &s.layout,
                    &s.k,
                    &s.v,
                    &batch,
                    black_box(&s.q),
                    n_heads,
                    scale,
                    None,
                    &mut s.out,
                )
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench_attention);
criterion_main!(benches);
