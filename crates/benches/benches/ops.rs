//! Element-wise kernels at the models' sizes (SmolLM2-135M: d 576, ffn 1536, 9x64 heads;
//! gemma-3-270m: d 640, ffn 2048, 4x256 heads; vocab-sized softmax), and the thread pool's cost
//! per `run` call against rayon and `std::thread::scope`.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use pagoda_kernels::ops::{self, Rope, RopeStyle};
use pagoda_kernels::parallel;
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};

fn data(n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 7919 % 1000) as f32 / 500.0) - 1.0)
        .collect()
}

fn bench_ops(c: &mut Criterion) {
    let mut g = c.benchmark_group("rms_norm");
    for n in [576, 640] {
        let (x, w) = (data(n), data(n));
        let mut out = vec![0.0; n];
        g.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| {
            b.iter(|| ops::rms_norm(black_box(&x), &w, 1e-6, &mut out))
        });
    }
    g.finish();

    let mut g = c.benchmark_group("rope");
    for (heads, hd, style, base) in [
        (9, 64, RopeStyle::Norm, 1e5),
        (4, 256, RopeStyle::Neox, 1e6),
    ] {
        let rope = Rope::new(hd, hd, base, style);
        let mut x = data(heads * hd);
        g.bench_function(format!("{heads}x{hd}"), |b| {
            b.iter(|| rope.apply(black_box(&mut x), heads, 1234))
        });
        // What a layer pays per token now that the step computes the angles once.
        let (mut q, mut k) = (data(heads * hd), data(hd));
        let (mut cos, mut sin) = (vec![0.0; rope.pairs()], vec![0.0; rope.pairs()]);
        rope.angles(1234, &mut cos, &mut sin);
        g.bench_function(format!("{heads}x{hd}+1_kv_head/precomputed_angles"), |b| {
            b.iter(|| rope.apply_qk_at(black_box(&mut q), heads, &mut k, 1, &cos, &sin))
        });
        g.bench_function(format!("{heads}x{hd}/angles"), |b| {
            b.iter(|| rope.angles(black_box(1234), &mut cos, &mut sin))
        });
    }
    g.finish();

    // A prompt step's residual add over 2,048 rows of 576: on the caller alone, and split over
    // the pool by `for_rows` (what the model does for prompt-sized batches).
    let mut g = c.benchmark_group("rows_2048x576");
    let y = data(2048 * 576);
    let mut x = data(2048 * 576);
    g.bench_function("add/caller", |b| {
        b.iter(|| ops::add_inplace(black_box(&mut x), &y))
    });
    g.bench_function("add/for_rows", |b| {
        b.iter(|| {
            parallel::for_rows(2048, [black_box(&mut x[..])], &|r, [part]| {
                ops::add_inplace(part, &y[r.start * 576..r.end * 576])
            })
        })
    });
    g.finish();

    let mut g = c.benchmark_group("activation");
    for n in [1536, 2048] {
        let up = data(n);
        let gate = data(n);
        let mut buf = gate.clone();
        g.bench_function(format!("silu_mul/{n}"), |b| {
            b.iter(|| {
                buf.copy_from_slice(&gate);
                ops::silu_mul(black_box(&mut buf), &up)
            })
        });
        g.bench_function(format!("gelu_tanh_mul/{n}"), |b| {
            b.iter(|| {
                buf.copy_from_slice(&gate);
                ops::gelu_tanh_mul(black_box(&mut buf), &up)
            })
        });
    }
    g.finish();

    let mut g = c.benchmark_group("softmax");
    for n in [49152, 262144] {
        let x = data(n);
        let mut buf = x.clone();
        g.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| {
            b.iter(|| {
                buf.copy_from_slice(&x);
                ops::softmax_inplace(black_box(&mut buf))
            })
        });
    }
    g.finish();
}

/// Cost of one fork-join of `n` near-empty tasks: what a decode step pays ~250 times.
fn bench_pool(c: &mut Criterion) {
    let threads = parallel::num_threads();
    let counter = AtomicUsize::new(0);
    let task = |i: usize| {
        counter.fetch_add(black_box(i), Ordering::Relaxed);
    };
    let mut g = c.benchmark_group("pool_per_call");
    g.bench_function(format!("pagoda_run/{threads}_tasks"), |b| {
        b.iter(|| parallel::run(threads, &task))
    });
    g.bench_function(format!("pagoda_run/{}_tasks", 4 * threads), |b| {
        b.iter(|| parallel::run(4 * threads, &task))
    });
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("rayon pool");
    g.bench_function(format!("rayon_scope/{threads}_tasks"), |b| {
        b.iter(|| {
            pool.scope(|s| {
                for i in 1..threads {
                    let task = &task;
                    s.spawn(move |_| task(i));
                }
                task(0);
            })
        })
    });
    g.bench_function(format!("rayon_par_iter/{threads}_tasks"), |b| {
        use rayon::prelude::*;
        b.iter(|| pool.install(|| (0..threads).into_par_iter().for_each(task)))
    });
    g.bench_function(format!("std_thread_scope/{threads}_tasks"), |b| {
        b.iter(|| {
            std::thread::scope(|s| {
                for i in 1..threads {
                    let task = &task;
                    s.spawn(move || task(i));
                }
                task(0);
            })
        })
    });
    g.finish();
}

criterion_group!(benches, bench_ops, bench_pool);
criterion_main!(benches);
