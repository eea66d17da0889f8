//! The fork-join used by every multi-threaded kernel: a persistent pool of workers that spin
//! briefly, then park. `run(n, f)` hands out task indices `0..n` to the caller and the workers and
//! returns when every task has finished. A decode step calls it a few hundred times, so the cost
//! per call (publish a job, wake, claim, wait) is what matters, not throughput.
//!
//! Protocol (one job at a time; callers from different threads queue on `call_lock`):
//! - `state` packs `generation << 32 | next_task`. The caller first closes the slot
//!   (`(generation + 1, CLOSED)`), then writes `job_f`, `n_tasks`, resets `completed`, then
//!   publishes `(generation + 2, 0)`. Workers and the caller claim a task by
//!   CAS on `state`, so a claim only succeeds for the generation the claimer read the job for.
//! - Each finished task bumps `completed` (Release). The caller returns only once
//!   `completed == n_tasks`; as every index was claimed by then, no one can claim again, and no
//!   one still holds `f`. That is why a stack-borrowed `f` is sound to share: it outlives every
//!   use. The job fields are only rewritten after that point, so a worker that won the CAS for
//!   generation `g` reads `g`'s `f` (its read happens-before the caller's wait ends).
//! - Parking uses a Dekker pair on SeqCst atomics: a worker bumps `sleepers` before its final
//!   check of `state`; the caller stores `state` before reading `sleepers`. One of them sees the
//!   other, so no wake-up is lost.

use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long an idle worker spins before parking. A decode step's gaps between kernels are a few
/// to a few tens of microseconds; sleeping through them costs a futex wake (~5-20 us) per call.
const SPIN_TIME: Duration = Duration::from_micros(100);

type TaskFn<'a> = &'a (dyn Fn(usize) + Sync);

/// Task index of a closed generation: no task can be claimed from it.
const CLOSED: u64 = 0xffff_ffff;

static CONFIGURED_THREADS: AtomicUsize = AtomicUsize::new(0);
static POOL: OnceLock<Pool> = OnceLock::new();
/// Called with its index on each pool thread as the pool starts (the caller that starts it is
/// 0, workers 1..): where `--numa` pins them.
static PLACEMENT: OnceLock<Box<dyn Fn(usize) + Send + Sync>> = OnceLock::new();

thread_local! {
    /// True on pool workers, and on a caller while it runs tasks: a nested `run` goes inline.
    static IN_TASK: Cell<bool> = const { Cell::new(false) };
    /// The pool of a thread inside [`RankPool::install`] (null: the process's pool).
    static CURRENT: Cell<*const Pool> = const { Cell::new(std::ptr::null()) };
}

/// A pool of its own for one tensor-parallel rank or pipeline stage: its kernels run on its
/// threads (pinned to the rank's CPUs) while the other ranks run theirs beside it, never on the
/// process's pool. Its workers end when it is dropped.
pub struct RankPool {
    pool: Pool,
}

impl RankPool {
    /// `threads` threads in all, the caller of [`RankPool::install`] being one; each worker
    /// runs `place(i)` first (i = 1..threads), where the rank pins it.
    pub fn start(threads: usize, place: impl Fn(usize) + Send + Sync + 'static) -> Self {
        Self {
            pool: Pool::start_placed(threads.max(1), Arc::new(place), "pagoda-rank-worker"),
        }
    }

    /// Runs `f` with every kernel it calls on this thread spread over this pool.
    pub fn install<R>(&self, f: impl FnOnce() -> R) -> R {
        struct Reset(*const Pool);
        impl Drop for Reset {
            fn drop(&mut self) {
                CURRENT.with(|c| c.set(self.0));
            }
        }
        let _reset = Reset(CURRENT.with(|c| c.replace(&self.pool)));
        f()
    }

    /// Threads of the pool, the caller included.
    pub fn threads(&self) -> usize {
        self.pool.threads
    }
}

impl Drop for RankPool {
    fn drop(&mut self) {
        let s = &self.pool.shared;
        s.stop.store(true, Ordering::SeqCst);
        let _park = s.park_lock.lock().unwrap_or_else(|e| e.into_inner());
        s.wake.notify_all();
    }
}

/// The pool of this thread's [`RankPool::install`], if any.
fn current() -> Option<&'static Pool> {
    let p = CURRENT.with(Cell::get);
    // SAFETY: `CURRENT` is set only inside `RankPool::install`, which borrows the pool for as
    // long as it is set, and reset on the way out; the `'static` here never escapes a call.
    unsafe { p.as_ref() }
}

/// Sets the total number of threads (caller included) kernels use. Call once at start-up,
/// before the first kernel runs; later calls have no effect on a pool that already exists.
pub fn set_num_threads(n: usize) {
    CONFIGURED_THREADS.store(n.max(1), Ordering::Relaxed);
}

/// Sets what each pool thread runs first with its index (0: the thread whose first kernel
/// starts the pool, workers 1..): NUMA placement pins them there. Call once at start-up, before
/// the first kernel runs; false when a placement was already set.
pub fn set_thread_placement(f: impl Fn(usize) + Send + Sync + 'static) -> bool {
    PLACEMENT.set(Box::new(f)).is_ok()
}

fn place(index: usize) {
    if let Some(f) = PLACEMENT.get() {
        f(index);
    }
}

/// The number of threads (caller included) a `run` spreads over.
pub fn num_threads() -> usize {
    if let Some(pool) = current() {
        return pool.threads;
    }
    match POOL.get() {
        Some(pool) => pool.threads,
        None => configured_threads(),
    }
}

fn configured_threads() -> usize {
    match CONFIGURED_THREADS.load(Ordering::Relaxed) {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    }
}

/// Runs `f(0)..f(n_tasks - 1)` across the pool and returns when all are done. Tasks are claimed
/// dynamically, so uneven tasks balance. A call from inside a task runs inline (no deadlock).
/// A panic in a task is re-raised here after every other task has finished.
pub fn run(n_tasks: usize, f: &(dyn Fn(usize) + Sync)) {
    if n_tasks == 0 {
        return;
    }
    if n_tasks == 1 || IN_TASK.with(Cell::get) {
        (0..n_tasks).for_each(f);
        return;
    }
    let pool = match current() {
        Some(pool) => pool,
        None => POOL.get_or_init(|| Pool::start(configured_threads())),
    };
    if pool.threads == 1 {
        (0..n_tasks).for_each(f);
        return;
    }
    pool.run(n_tasks, f);
}

/// The body of a [`for_rows`] pass: a run of rows and each buffer's slice of them.
pub type RowsFn<'a, T, const N: usize> = dyn Fn(std::ops::Range<usize>, [&mut [T]; N]) + Sync + 'a;

/// Below this many elements in all, a [`for_rows`] pass runs on the caller: splitting it would
/// cost a fork-join (a few µs) to save less (a decode step's rows are a few thousand values).
const MIN_ROWS_PARALLEL_ELEMS: usize = 32 * 1024;

/// Runs `f(rows, parts)` over runs of the `rows` rows of `N` row-major buffers, where `parts[i]`
/// is `bufs[i]`'s slice for those rows (`bufs[i].len() / rows` values per row). Large buffers
/// (a prompt's activations) are split across the pool in a few runs per thread; small ones go to
/// `f` whole on the caller. For the row-wise passes between the matmuls (norms, residual adds,
/// RoPE, the gated activation): serial, they left the second core idle for ~20% of a prompt step.
///
/// With `rows == 0`, `f` is not called.
///
/// # Panics
/// If a buffer's length is not a multiple of `rows`.
pub fn for_rows<T: Send, const N: usize>(rows: usize, bufs: [&mut [T]; N], f: &RowsFn<'_, T, N>) {
    if rows == 0 {
        return; // an empty batch: nothing to do
    }
    for b in &bufs {
        assert!(
            b.len().is_multiple_of(rows),
            "for_rows: {} values are not {rows} rows",
            b.len()
        );
    }
    let total: usize = bufs.iter().map(|b| b.len()).sum();
    let threads = num_threads();
    if rows == 1 || threads == 1 || total < MIN_ROWS_PARALLEL_ELEMS {
        f(0..rows, bufs);
        return;
    }
    let row_len: [usize; N] = std::array::from_fn(|i| bufs[i].len() / rows);
    let per_task = rows.div_ceil(threads * 4);
    let shared = bufs.map(SharedMut::new);
    run(rows.div_ceil(per_task), &|task| {
        let r = task * per_task..((task + 1) * per_task).min(rows);
        // SAFETY: tasks take disjoint row ranges, so their slices of each buffer are disjoint.
        let parts = std::array::from_fn(|i| unsafe {
            shared[i].slice_mut(r.start * row_len[i], r.len() * row_len[i])
        });
        f(r, parts);
    });
}

struct Pool {
    threads: usize,
    /// Held by the pool and each of its workers: a dropped [`RankPool`]'s is freed when its
    /// last worker has seen `stop` and returned.
    shared: Arc<Shared>,
    /// Serialises callers from different threads: the job slot holds one job at a time.
    call_lock: Mutex<()>,
}

struct Shared {
    /// `generation << 32 | next unclaimed task index`.
    state: AtomicU64,
    /// Task count of the current generation's job.
    n_tasks: AtomicUsize,
    /// Points at the caller's `&dyn Fn` (on its stack) for the current job.
    job_f: AtomicPtr<TaskFn<'static>>,
    /// Tasks of the current job that have returned.
    completed: AtomicUsize,
    /// Set when a task of the current job panicked.
    panicked: AtomicBool,
    /// Workers parked or about to park on `wake`.
    sleepers: AtomicUsize,
    /// Set when a [`RankPool`] is dropped: its workers end.
    stop: AtomicBool,
    park_lock: Mutex<()>,
    wake: Condvar,
}

impl Pool {
    /// The process's pool, its threads placed by [`set_thread_placement`].
    fn start(threads: usize) -> Self {
        place(0);
        Self::start_placed(threads, Arc::new(place), "pagoda-worker")
    }

    /// `threads` threads in all (the caller one), worker `i` running `place(i)` first.
    fn start_placed(threads: usize, place: Arc<dyn Fn(usize) + Send + Sync>, name: &str) -> Self {
        let shared = Arc::new(Shared {
            state: AtomicU64::new(0),
            n_tasks: AtomicUsize::new(0),
            job_f: AtomicPtr::new(std::ptr::null_mut()),
            completed: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            sleepers: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            park_lock: Mutex::new(()),
            wake: Condvar::new(),
        });
        let mut started = 1;
        for i in 1..threads {
            let place = Arc::clone(&place);
            let shared = Arc::clone(&shared);
            let spawned = std::thread::Builder::new()
                .name(format!("{name}-{i}"))
                .spawn(move || {
                    place(i);
                    worker_loop(&shared)
                });
            if spawned.is_ok() {
                started += 1;
            }
        }
        Pool {
            threads: started,
            shared,
            call_lock: Mutex::new(()),
        }
    }

    fn run(&self, n_tasks: usize, f: TaskFn<'_>) {
        // A poisoned lock only means another caller's task panicked; the slot is free again.
        let _guard = self.call_lock.lock().unwrap_or_else(|e| e.into_inner());
        let s = &*self.shared;
        let f_slot: TaskFn<'_> = f;
        // Lifetime erased: every use of the pointer ends before this function returns (see the
        // module header).
        let f_ptr = (&f_slot as *const TaskFn<'_>)
            .cast::<TaskFn<'static>>()
            .cast_mut();
        debug_assert!(n_tasks < CLOSED as usize);
        // Close the previous job's slot before touching the job fields. A worker that read the
        // previous state may still be about to claim from it; its CAS now fails, so it can never
        // pair an index of the previous job with this job's `n_tasks` and `f` (which it could
        // when `n_tasks` was rewritten while the previous state was still current).
        let closed = (s.state.load(Ordering::Relaxed) >> 32).wrapping_add(1) & 0xffff_ffff;
        s.state.store(closed << 32 | CLOSED, Ordering::SeqCst);
        s.n_tasks.store(n_tasks, Ordering::Relaxed);
        s.job_f.store(f_ptr, Ordering::Relaxed);
        s.completed.store(0, Ordering::Relaxed);
        s.panicked.store(false, Ordering::Relaxed);
        let generation = closed.wrapping_add(1) & 0xffff_ffff;
        s.state.store(generation << 32, Ordering::SeqCst);
        if s.sleepers.load(Ordering::SeqCst) > 0 {
            let _park = s.park_lock.lock().unwrap_or_else(|e| e.into_inner());
            s.wake.notify_all();
        }

        IN_TASK.with(|t| t.set(true));
        work_on(s, generation);
        IN_TASK.with(|t| t.set(false));

        let mut spins = 0u32;
        while s.completed.load(Ordering::Acquire) < n_tasks {
            spins += 1;
            if spins < 1 << 14 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        if s.panicked.load(Ordering::Relaxed) {
            resume_unwind(Box::new("a pagoda_kernels::parallel task panicked"));
        }
    }
}

/// Claims and runs tasks of job `generation` until none are left.
fn work_on(s: &Shared, generation: u64) {
    loop {
        let cur = s.state.load(Ordering::Acquire);
        if cur >> 32 != generation {
            return;
        }
        let idx = (cur & 0xffff_ffff) as usize;
        if idx >= s.n_tasks.load(Ordering::Acquire) {
            return;
        }
        if s.state
            .compare_exchange_weak(cur, cur + 1, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            continue;
        }
        // SAFETY: we own claimed task `idx` of `generation`, so that job's caller is still
        // waiting in `Pool::run` and the `&dyn Fn` it points at is alive (module header).
        let f: TaskFn<'_> = unsafe { *s.job_f.load(Ordering::Acquire) };
        if catch_unwind(AssertUnwindSafe(|| f(idx))).is_err() {
            s.panicked.store(true, Ordering::Relaxed);
        }
        s.completed.fetch_add(1, Ordering::Release);
    }
}

fn worker_loop(s: &Shared) {
    IN_TASK.with(|t| t.set(true));
    let mut seen = 0u64;
    loop {
        let start = Instant::now();
        let mut spins = 0u32;
        let generation = loop {
            if s.stop.load(Ordering::Relaxed) {
                return;
            }
            let g = s.state.load(Ordering::Acquire) >> 32;
            if g != seen {
                break g;
            }
            spins = spins.wrapping_add(1);
            if !spins.is_multiple_of(64) || start.elapsed() < SPIN_TIME {
                std::hint::spin_loop();
                continue;
            }
            let mut guard = s.park_lock.lock().unwrap_or_else(|e| e.into_inner());
            s.sleepers.fetch_add(1, Ordering::SeqCst);
            while s.state.load(Ordering::SeqCst) >> 32 == seen && !s.stop.load(Ordering::SeqCst) {
                guard = s.wake.wait(guard).unwrap_or_else(|e| e.into_inner());
            }
            s.sleepers.fetch_sub(1, Ordering::SeqCst);
            drop(guard);
        };
        seen = generation;
        work_on(s, generation);
    }
}

/// A raw pointer to an output buffer that tasks write disjoint parts of.
///
/// Sync reasoning: the pointer itself is plain data; soundness rests on the user's promise,
/// checked by `slice_mut`'s contract, that no two tasks touch overlapping ranges and that the
/// buffer outlives the `run` call (it is borrowed mutably for that long by `new`).
pub(crate) struct SharedMut<'a, T> {
    ptr: *mut T,
    len: usize,
    _borrow: std::marker::PhantomData<&'a mut [T]>,
}

// SAFETY: see the type's doc: only disjoint ranges are ever materialised, and `T: Send` values
// are what is written from other threads.
unsafe impl<T: Send> Sync for SharedMut<'_, T> {}

impl<'a, T> SharedMut<'a, T> {
    pub(crate) fn new(buf: &'a mut [T]) -> Self {
        Self {
            ptr: buf.as_mut_ptr(),
            len: buf.len(),
            _borrow: std::marker::PhantomData,
        }
    }

    /// Length of the buffer.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// # Safety
    /// No other live slice from this `SharedMut` may overlap `start..start + len`.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn slice_mut(&self, start: usize, len: usize) -> &mut [T] {
        assert!(
            start <= self.len && len <= self.len - start,
            "SharedMut range out of bounds"
        );
        // SAFETY: in bounds (checked above); exclusivity is the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(start), len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rank_pool_runs_its_callers_kernels_and_ends_when_dropped() {
        let pool = RankPool::start(3, |_| {});
        assert_eq!(pool.threads(), 3);
        let ran = AtomicUsize::new(0);
        let threads = Mutex::new(std::collections::HashSet::new());
        pool.install(|| {
            assert_eq!(num_threads(), 3);
            run(256, &|_| {
                ran.fetch_add(1, Ordering::Relaxed);
                let mut t = threads.lock().unwrap_or_else(|e| e.into_inner());
                t.insert(std::thread::current().name().map(str::to_owned));
                // Long enough that the workers claim some.
                std::thread::sleep(Duration::from_micros(50));
            });
        });
        assert_eq!(ran.load(Ordering::Relaxed), 256);
        let names = threads.into_inner().unwrap_or_else(|e| e.into_inner());
        assert!(
            names
                .iter()
                .flatten()
                .any(|n| n.starts_with("pagoda-rank-worker")),
            "{names:?}"
        );
        // Outside `install` the thread is back on the process's pool.
        assert!(current().is_none());
        let shared = Arc::downgrade(&pool.pool.shared);
        drop(pool);
        // Its workers see `stop`, return and drop their hold on the shared state: nothing of
        // the pool is left (a dropped pool once leaked it).
        let start = Instant::now();
        while shared.upgrade().is_some() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "a worker did not end"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}
