//! Paged attention at the models' head configs: SmolLM2-135M (9 q / 3 kv heads of 64) and
//! gemma-3-270m (4 q / 1 kv head of 256), over f32, f16 and int8 arenas. Decode batch 1: 1 query over
//! 100/400/1000 tokens of context; decode batch 32: 32 requests of one query over ~200 tokens;
//! prefill: 512 new queries from an empty cache. Block size 16, shuffled block ids.
//! Env: PAGODA_THREADS (pool size; 1 times thread CPU time), PAGODA_KV (f32, f16 or int8 only).

use criterion::Criterion;
use criterion::measurement::{Measurement, ValueFormatter, WallTime};
use half::f16;
use pagoda_kernels::attention::{
    AttnBatch, KvElement, KvLayout, KvScales, KvScalesMut, paged_attention, write_kv,
};
use pagoda_kernels::parallel;
use std::hint::black_box;
use std::time::Duration;

struct Setup<T> {
    layout: KvLayout,
    k: Vec<T>,
    v: Vec<T>,
    /// Per-row scales (int8 only).
    ks: Vec<f32>,
    vs: Vec<f32>,
    q: Vec<f32>,
    out: Vec<f32>,
    qsl: Vec<u32>,
    seq_lens: Vec<u32>,
    table: Vec<u32>,
    max_blocks: usize,
}

/// One arena holding every request of `shapes` (`(context, q_len)`), blocks scattered by a fixed
/// permutation so consecutive positions never sit in consecutive blocks.
fn setup<T: KvElement>(
    n_heads: usize,
    nkv: usize,
    hd: usize,
    shapes: &[(usize, usize)],
) -> Setup<T> {
    let bs = 16;
    let max_blocks = shapes
        .iter()
        .map(|&(c, _)| c.div_ceil(bs))
        .max()
        .unwrap_or(0);
    let blocks: usize = shapes.iter().map(|&(c, _)| c.div_ceil(bs)).sum();
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
    // int8 holds the values times 254 with scales of 1/254: the same values read back.
    let int_scale = if T::SCALED { 254.0 } else { 1.0 };
    let arena = |seed| {
        let src: Vec<f32> = fill(layout.arena_len(), seed)
            .iter()
            .map(|x| x * int_scale)
            .collect();
        let mut dst = vec![T::default(); src.len()];
        T::from_f32(&src, &mut dst);
        dst
    };
    let scales = vec![1.0 / int_scale; if T::SCALED { layout.scales_len() } else { 0 }];
    // Block j of the whole batch lives at (j * step) mod blocks, step coprime with blocks.
    let step = (7..).find(|s| gcd(*s, blocks.max(1)) == 1).unwrap_or(1);
    let mut table = vec![0u32; shapes.len() * max_blocks];
    let mut next = 0;
    for (s, &(c, _)) in shapes.iter().enumerate() {
        for j in 0..c.div_ceil(bs) {
            table[s * max_blocks + j] = ((next * step) % blocks) as u32;
            next += 1;
        }
    }
    let mut qsl = vec![0u32];
    for &(_, q_len) in shapes {
        qsl.push(qsl.last().copied().unwrap_or(0) + q_len as u32);
    }
    let n_tokens = *qsl.last().unwrap_or(&0) as usize;
    Setup {
        layout,
        k: arena(1),
        v: arena(2),
        ks: scales.clone(),
        vs: scales,
        q: fill(n_tokens * n_heads * hd, 3),
        out: vec![0.0; n_tokens * n_heads * hd],
        qsl,
        seq_lens: shapes.iter().map(|&(c, _)| c as u32).collect(),
        table,
        max_blocks,
    }
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

fn run<T: KvElement>(s: &mut Setup<T>, n_heads: usize) {
    let scale = 1.0 / (s.layout.head_dim as f32).sqrt();
    let batch = AttnBatch {
        query_start_loc: &s.qsl,
        seq_lens: &s.seq_lens,
        block_tables: &s.table,
        max_blocks_per_seq: s.max_blocks,
    };
    paged_attention(
        &s.layout,
        &s.k,
        &s.v,
        KvScales { k: &s.ks, v: &s.vs },
        &batch,
        black_box(&s.q),
        n_heads,
        scale,
        None,
        &mut s.out,
    )
}

fn bench_dtype<T: KvElement, M: Measurement>(c: &mut Criterion<M>, dtype: &str) {
    let models = [
        ("smollm_9x64_kv3", 9, 3, 64),
        ("gemma_4x256_kv1", 4, 1, 256),
    ];
    let mut g = c.benchmark_group(format!("attention_decode_{dtype}"));
    g.warm_up_time(Duration::from_secs(1));
    g.measurement_time(Duration::from_secs(3));
    for (name, n_heads, nkv, hd) in models {
        for context in [100, 400, 1000] {
            let mut s = setup::<T>(n_heads, nkv, hd, &[(context, 1)]);
            g.bench_function(format!("{name}/ctx{context}"), |b| {
                b.iter(|| run(&mut s, n_heads))
            });
        }
        // 32 decodes of slightly different lengths, as a busy server's step holds.
        let shapes: Vec<(usize, usize)> = (0..32).map(|i| (180 + (i * 13) % 41, 1)).collect();
        let mut s = setup::<T>(n_heads, nkv, hd, &shapes);
        g.bench_function(format!("{name}/batch32_ctx200"), |b| {
            b.iter(|| run(&mut s, n_heads))
        });
    }
    g.finish();
    // Writing one decode step's K/V rows (batch 32) into the arena: the f16 narrowing runs on
    // the caller, between two products.
    let mut g = c.benchmark_group(format!("write_kv_{dtype}"));
    for (name, _, nkv, hd) in models {
        let mut s = setup::<T>(nkv, nkv, hd, &[(512, 1)]);
        let slots: Vec<u32> = (0..32).map(|i| i * 13 % 512).collect();
        let rows: Vec<f32> = (0..32 * nkv * hd).map(|i| (i % 97) as f32 * 0.01).collect();
        g.bench_function(format!("{name}/32_tokens"), |b| {
            b.iter(|| {
                let scales = KvScalesMut {
                    k: &mut s.ks,
                    v: &mut s.vs,
                };
                write_kv(
                    &s.layout,
                    &mut s.k,
                    &mut s.v,
                    scales,
                    black_box(&slots),
                    &rows,
                    &rows,
                )
            })
        });
    }
    g.finish();
    let mut g = c.benchmark_group(format!("attention_prefill_{dtype}"));
    g.sample_size(20);
    g.warm_up_time(Duration::from_secs(1));
    g.measurement_time(Duration::from_secs(4));
    for (name, n_heads, nkv, hd) in models {
        let mut s = setup::<T>(n_heads, nkv, hd, &[(512, 512)]);
        g.bench_function(format!("{name}/q512"), |b| b.iter(|| run(&mut s, n_heads)));
    }
    g.finish();
}

/// CPU time of the calling thread (`CLOCK_THREAD_CPUTIME_ID`): on a machine shared with other
/// builds, time spent descheduled is left out. Only meaningful with one thread.
struct ThreadCpuTime;

#[repr(C)]
struct Timespec {
    tv_sec: i64,
    tv_nsec: i64,
}

unsafe extern "C" {
    /// POSIX `clock_gettime`, from the C library std already links.
    fn clock_gettime(clock: i32, tp: *mut Timespec) -> i32;
}

/// Linux `CLOCK_THREAD_CPUTIME_ID` (`<time.h>`).
const CLOCK_THREAD_CPUTIME_ID: i32 = 3;

fn thread_cpu_ns() -> u64 {
    let mut t = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec (two 64-bit fields on x86-64 Linux) for the call to fill.
    unsafe { clock_gettime(CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

impl Measurement for ThreadCpuTime {
    type Intermediate = u64;
    type Value = Duration;
    fn start(&self) -> u64 {
        thread_cpu_ns()
    }
    fn end(&self, start: u64) -> Duration {
        Duration::from_nanos(thread_cpu_ns().saturating_sub(start))
    }
    fn add(&self, a: &Duration, b: &Duration) -> Duration {
        *a + *b
    }
    fn zero(&self) -> Duration {
        Duration::ZERO
    }
    fn to_f64(&self, d: &Duration) -> f64 {
        d.as_nanos() as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        static WALL: WallTime = WallTime;
        WALL.formatter()
    }
}

fn bench_attention<M: Measurement>(mut c: Criterion<M>) {
    // PAGODA_KV=f32, f16 or int8 runs only that arena type.
    let only = std::env::var("PAGODA_KV").ok();
    let wanted = |name: &str| only.as_deref().is_none_or(|o| o == name);
    if wanted("f32") {
        bench_dtype::<f32, M>(&mut c, "f32");
    }
    if wanted("f16") {
        bench_dtype::<f16, M>(&mut c, "f16");
    }
    if wanted("int8") {
        bench_dtype::<i8, M>(&mut c, "int8");
    }
    c.final_summary();
}

/// PAGODA_THREADS sets the pool size; with 1 thread the kernel runs on the caller and is timed
/// in thread CPU time, steadier than wall time on a shared machine.
fn main() {
    let threads = std::env::var("PAGODA_THREADS")
        .ok()
        .and_then(|v| v.parse().ok());
    if let Some(n) = threads {
        parallel::set_num_threads(n);
    }
    if threads == Some(1) {
        bench_attention(
            Criterion::default()
                .with_measurement(ThreadCpuTime)
                .configure_from_args(),
        );
    } else {
        bench_attention(Criterion::default().configure_from_args());
    }
}
