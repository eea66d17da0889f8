//! All-reduce latency of the shared-memory collective against message size: two ranks (this
//! thread and a partner pinned apart when there are two CPUs), each call a sum of two buffers
//! of `n` f32. Qwen2.5 0.5B's decode message is 896 values per sequence (one row of the
//! residual stream), a 512-token prompt step's 512 x 896.
//! `cargo bench -p pagoda-benches --bench all_reduce`.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use pagoda_model::tensor_parallel::affinity;
use pagoda_model::tensor_parallel::{Collective, SharedMemoryCollective};

fn all_reduce(c: &mut Criterion) {
    let cpus = affinity::allowed_cpus();
    affinity::pin_current_thread(&affinity::rank_cpus(&cpus, 0, 2));
    let mut g = c.benchmark_group("all_reduce_2_ranks");
    g.measurement_time(Duration::from_secs(3));
    for n in [896usize, 4 * 896, 32 * 896, 512 * 896] {
        let comm = Arc::new(SharedMemoryCollective::new(2));
        let stop = Arc::new(AtomicBool::new(false));
        let partner = {
            let (comm, stop, cpus) = (Arc::clone(&comm), Arc::clone(&stop), cpus.clone());
            std::thread::spawn(move || {
                affinity::pin_current_thread(&affinity::rank_cpus(&cpus, 1, 2));
                let mut x = vec![1.0f32; n];
                while !stop.load(Ordering::Relaxed) {
                    if comm.all_reduce_sum(1, &mut x).is_err() {
                        return;
                    }
                    x.fill(1.0);
                }
            })
        };
        let mut x = vec![1.0f32; n];
        g.throughput(Throughput::Bytes((n * 4) as u64));
        g.bench_function(
            BenchmarkId::from_parameter(format!("{}KiB", n * 4 / 1024)),
            |b| {
                b.iter(|| {
                    comm.all_reduce_sum(0, &mut x).unwrap();
                    x.fill(1.0);
                })
            },
        );
        stop.store(true, Ordering::Relaxed);
        comm.abort(); // releases the partner from the call it waits in
        partner.join().unwrap();
    }
    g.finish();
}

criterion_group!(benches, all_reduce);
criterion_main!(benches);
