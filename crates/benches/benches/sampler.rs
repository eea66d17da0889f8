//! Cost of `Sampler::sample` on one row of logits at the vocabulary sizes of SmolLM2 (49,152)
//! and Gemma 3 (262,144), for greedy, plain temperature, top-k, top-p, min-p and logprobs.
//! The logits are synthetic but shaped like a language model's: a normal bulk and a few clear
//! favourites holding most of the mass; `*_flat` cases use a wider bulk holding most of it
//! (a high-entropy step, top-p's worst case). `cargo bench -p pagoda-benches --bench sampler`
#![allow(clippy::unwrap_used)]

use std::hint::black_box;
use std::sync::Mutex;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use pagoda_core::SamplingParams;
use pagoda_model::Sampler;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// A normal(0, `spread`) bulk (Box-Muller) with 16 favourites at 8 + 12 * j / 16.
fn logits(vocab: usize, spread: f32) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let mut v: Vec<f32> = (0..vocab)
        .map(|_| {
            let u1: f32 = rng.random::<f32>().max(1e-7);
            let u2: f32 = rng.random();
            (-2.0 * u1.ln()).sqrt() * (std::f32::consts::TAU * u2).cos() * spread
        })
        .collect();
    for j in 0..16 {
        let id = (j * 7919 + 13) % vocab;
        v[id] = 8.0 + 12.0 * (j as f32 / 16.0);
    }
    v
}

/// (name, bulk spread, parameters).
fn cases() -> Vec<(&'static str, f32, SamplingParams)> {
    let base = SamplingParams {
        seed: Some(1),
        ..Default::default()
    };
    vec![
        ("greedy", 2.0, SamplingParams::greedy(16)),
        ("temp1", 2.0, base.clone()),
        (
            "temp0.7_topk40",
            2.0,
            SamplingParams {
                temperature: 0.7,
                top_k: 40,
                ..base.clone()
            },
        ),
        (
            "top_p0.9",
            2.0,
            SamplingParams {
                top_p: 0.9,
                ..base.clone()
            },
        ),
        (
            "min_p0.05",
            2.0,
            SamplingParams {
                min_p: 0.05,
                ..base.clone()
            },
        ),
        (
            "logprobs5",
            2.0,
            SamplingParams {
                logprobs: Some(5),
                ..base.clone()
            },
        ),
        ("temp1_flat", 4.5, base.clone()),
        ("top_p0.9_flat", 4.5, SamplingParams { top_p: 0.9, ..base }),
    ]
}

fn benches(c: &mut Criterion) {
    for vocab in [49_152usize, 262_144] {
        let mut group = c.benchmark_group(format!("sample/{vocab}"));
        group
            .sample_size(30)
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(2))
            .throughput(Throughput::Elements(vocab as u64));
        for (name, spread, params) in cases() {
            let row = logits(vocab, spread);
            let mut s = Sampler::new(params, 0);
            group.bench_function(name, |b| b.iter(|| s.sample(black_box(&row)).unwrap()));
        }
        group.finish();
    }
    batch32(c);
}

/// 32 streams at temperature 1 on distinct rows, one after another and across the kernel
/// pool (as `ModelRunner` samples a step).
fn batch32(c: &mut Criterion) {
    for vocab in [49_152usize, 262_144] {
        let rows: Vec<Vec<f32>> = (0..32)
            .map(|i| {
                let mut r = logits(vocab, 2.0);
                r.rotate_left(i * 977);
                r
            })
            .collect();
        let samplers: Vec<Mutex<Sampler>> = (0..32)
            .map(|i| Mutex::new(Sampler::new(SamplingParams::default(), i)))
            .collect();
        let mut group = c.benchmark_group(format!("batch32/{vocab}"));
        group
            .sample_size(20)
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(3));
        let one = |i: usize| {
            let token = samplers[i].lock().unwrap().sample(&rows[i]).unwrap();
            black_box(token);
        };
        group.bench_function("sequential", |b| b.iter(|| (0..32).for_each(one)));
        group.bench_function("parallel", |b| {
            b.iter(|| pagoda_kernels::parallel::run(32, &one))
        });
        group.finish();
    }
}

criterion_group!(sampler, benches);
criterion_main!(sampler);
